"""flash-io's report page and claim metrics, from microbenchmark records made here on tiny shapes."""

import json

import pytest

from reproductions.flash_io import report
from reproductions.flash_io.count import count_io
from suite.micro import Microbench, micro_record
from suite.records import load_records, write_record
from suite.verdicts import METRICS, claim_frame

MICRO = "reproductions.flash_io.micro"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flash-io")
    items = [
        Microbench(
            "io-n",
            f"{MICRO}:io",
            [dict(n=n, d=4, m=128, causal=c) for c in (False, True) for n in (32, 64, 128)],
            repeat=1,
            warmup=0,
        ),
        Microbench("io-d", f"{MICRO}:io", [dict(n=128, d=d, m=256) for d in (2, 4, 8)], repeat=1, warmup=0),
        Microbench("io-m", f"{MICRO}:io", [dict(n=128, d=4, m=m) for m in (40, 128, 512)], repeat=1, warmup=0),
        Microbench(
            "io-gpt2",
            f"{MICRO}:io",
            [dict(n=64, d=8, m=256, causal=c, heads=4) for c in (True, False)],
            repeat=1,
            warmup=0,
        ),
        Microbench(
            "exactness",
            f"{MICRO}:exactness",
            [dict(n=20, d=4, m=141, causal=c) for c in (False, True)],
            repeat=1,
            warmup=0,
        ),
        Microbench(
            "sdpa-n",
            f"{MICRO}:sdpa",
            [
                dict(backend=b, n=n, d=16, batch=1, heads=2, backward=True)
                for b in ("math", "flash")
                for n in (128, 256, 512)
            ],
            repeat=1,
        ),
        Microbench(
            "sdpa-gpt2",
            f"{MICRO}:sdpa",
            [dict(backend=b, n=256, d=16, batch=1, heads=2, backward=True) for b in ("math", "flash")],
            repeat=3,
        ),
    ]
    for item in items:
        record = micro_record(item, "flash-io", f"test {item.name}", str(folder))
        write_record(record, folder / f"{record['run_id']}.json")
    return folder


def test_summary_fits_and_page(results, tmp_path):
    records, skipped = load_records(results)
    assert not skipped
    summary = report.summarize(records)
    assert summary["executed_equals_closed_form"]
    # standard = 12 N d + 11 N^2 exactly (count.py's closed form, forward + backward)
    assert summary["theorem2"]["standard"]["a"] == pytest.approx(12) and summary["theorem2"]["standard"][
        "b"
    ] == pytest.approx(11)
    assert summary["slopes_n"]["standard"] > 1.5 and summary["slope_m_tiled"] < -0.5
    assert summary["proposition3"]["min_tiled_over_4nd"] >= 1
    gpt2 = {row["causal"]: row for row in summary["gpt2"]}
    assert gpt2[False]["ratio"] == count_io(64, 8, None, algorithm="standard") / count_io(64, 8, 256, algorithm="tiled")
    assert summary["memory_slopes_n"]["math+backward"] > summary["memory_slopes_n"]["flash+backward"]
    assert summary["runtime_gpt2"]["ratio"] > 0
    page = report.write(results, tmp_path)
    text = page.read_text()
    assert text.count("<img") == 4 and "counted by the instrumented algorithms" in text.lower()
    assert json.loads((tmp_path / "io-summary.json").read_text())["paper"]["standard_gb"] == 40.3


def test_claim_metrics_read_micro_rows(results):
    records, _ = load_records(results)
    df = claim_frame(records)
    hbm = METRICS["micro"](df, method="io-gpt2", field="ratio_standard_to_tiled", variant={"causal": True})
    assert hbm.values.tolist() == [
        count_io(64, 8, None, algorithm="standard") / count_io(64, 8, 256, algorithm="tiled", causal=True)
    ]
    exact = METRICS["micro"](df, method="exactness", field="max_abs_error")
    assert len(exact.values) == 2 and max(exact.values) < 1e-12
    ratio = METRICS["micro"](
        df, method="sdpa-gpt2", field="time_s_median", variant={"backend": "math"}, over={"backend": "flash"}
    )
    assert len(ratio.values) == 1 and ratio.values[0] > 0
    slope = METRICS["micro-slope"](
        df, method="sdpa-n", field="peak_bytes", x="n", variant={"backend": "flash", "backward": True}
    )
    assert 0.5 < slope.values[0] < 1.5
    assert len(METRICS["micro"](df, method="no-such-item", field="x").values) == 0
