"""32x32-image classifiers (CIFAR) built from torchvision's ResNet and Swin pieces.

Only the stems, widths and window geometry change for 32x32 inputs; the residual blocks are
torchvision's own BasicBlock and SwinTransformerBlock, which a strategy wraps or drops from outside.
"""

from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet, conv3x3
from torchvision.models.swin_transformer import SwinTransformer


def _cifar_stem(model: ResNet, in_channels: int) -> ResNet:
    """A 3x3 stride-1 stem without max-pool: a 7x7/2 stem and pool would shrink 32 px to 8 px at once."""
    model.conv1 = conv3x3(in_channels, model.conv1.out_channels)
    # The same init ResNet gives its other convolutions.
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


class _WideResNet(ResNet):
    """ResNet whose residual stages are `widen` times wider than torchvision's.

    torchvision's BasicBlock rejects width_per_group != 64, so the planes are widened in _make_layer.
    The stem keeps 64 channels and the first stage widens through its projection shortcut, as the
    first group of a WRN does.
    """

    widen = 2

    def __init__(self, layers: list[int], num_classes: int) -> None:
        super().__init__(BasicBlock, layers, num_classes=num_classes)
        self.fc = nn.Linear(self.fc.in_features * self.widen, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        return super()._make_layer(block, planes * self.widen, blocks, stride, dilate)


def resnet18(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    return _cifar_stem(ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes), in_channels)


def wrn18(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """WideResNet-18: ResNet-18's topology with BasicBlocks of twice the width."""
    return _cifar_stem(_WideResNet([2, 2, 2, 2], num_classes=num_classes), in_channels)


def swin_t(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """Swin-T's embed_dim, depths and heads, with patch size 1 and window size 4 for 32x32 inputs.

    Feature maps are then 32, 16, 8 and 4 tokens a side, each a multiple of the window, so
    torchvision never zero-pads a map (its padded tokens would enter attention unmasked) and, as in
    Swin-T at 224 px (56 tokens, window 7), stage 1 holds 8x8 windows and stage 4 exactly one.
    Patch 2 would leave a 2x2 last stage padded to a 4x4 window; window 2 would attend over 4 tokens.
    """
    model = SwinTransformer(
        patch_size=[1, 1],
        embed_dim=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=[4, 4],
        stochastic_depth_prob=0.2,
        num_classes=num_classes,
    )
    # torchvision's patch embedding takes 3 channels; this one takes in_channels.
    model.features[0][0] = nn.Conv2d(in_channels, 96, kernel_size=1)
    return model
