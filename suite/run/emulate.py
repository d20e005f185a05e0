"""K logical workers as threads of one process (`--emulate`): the papers' worker counts on a few cores or one GPU.

Quality depends on the arithmetic of the updates, not on where the workers sit (issue 43). Each logical worker is
a thread running the suite's own `train`: the same strategy, the same rows of each global batch, masks,
averaging and optimizer state as a real rank. The process group is torch's threaded process group
(torch.testing._internal.distributed.multi_threaded_pg, the backend torch's own DTensor and FSDP tests run on):
a collective waits for every rank's thread, then one thread reduces the ranks' tensors in rank order. What it
lacks is written here, because no maintained library has it:

- point-to-point `send` and `recv` (SDP assembles its evaluation model with them);
- one random stream per worker: the default generators belong to the process, so the worker taking the turn puts
  its own state in them and the one giving it up takes its state out (`_take_turn`, `_give_turn`); a worker's model
  initialisation and every draw after (Dion's first Q) come from its own seeded stream, as in a process of its own.
  Left shared, Dion's draws interleaved as the threads ran: two emulated runs of one configuration differed by
  1e-3 nats at their second step;
- one worker computing at a time (`_turn`): a worker holds the turn while it computes and gives it up while it
  waits for the others (in a collective, a receive, a group's creation). K threads computing at once on a few
  cores each ran their ops on a team of the intra-op threads (128 workers: a load of 93 on 2 cores, and a step
  twice as slow as one process's); taking turns, each op has every core, as in one process;
- the training data loaded once and read by every worker (`shared`): 128 copies of a corpus were 10 GB;
- a meeting of every worker at each step's edges (`Meeting`), which times the step: one worker's own clock sees
  only the turns it held (FL+FSDP at 128 workers, whose workers meet every F steps, recorded 17,198 tokens a second
  where the process made about 2,300).

What differs from real workers, and how the record says so: a sum of more than two ranks' tensors is taken in
another order than gloo's, so losses agree with a real run within a tolerance (tests/test_emulate.py measures
it) rather than bit for bit; memory and time belong to the one process, so the memory meter is off and the
record's `parallel.emulated` is true with `parallel.processes` 1.
"""

from __future__ import annotations

import copy
import gc
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from suite.config import RunConfig
from suite.meters import comm
from suite.meters.comm import tensor_bytes

BACKEND = "emulated"
_state = threading.local()  # a logical worker's own: whether it is one, its generators' states, its turn
_turn = threading.Lock()  # held by the one worker computing
_patience = {"s": 1800.0}  # how long a worker waits for its turn: the run's collective timeout
_shared: dict = {}
_shared_lock = threading.Lock()


def active() -> bool:
    """Whether this thread is a logical worker of an emulated run."""
    return getattr(_state, "emulated", False)


def cpu_backend() -> str:
    """The backend of a group for CPU tensors (control messages, checks): gloo, or in a logical worker the emulated
    group, since workers that take turns stall in a gloo rendezvous between threads."""
    return BACKEND if active() else "gloo"


@contextmanager
def waiting() -> Iterator[None]:
    """Around a wait for the other workers: the turn goes to them, and comes back after."""
    if not getattr(_state, "turn", False):
        yield
        return
    _give_turn()
    try:
        yield
    finally:
        _take_turn()


def _give_turn() -> None:
    _state.rng = _rng_state()
    _state.turn = False
    _turn.release()


def _take_turn() -> None:
    """The turn, or TimeoutError after the run's collective timeout (a worker stalled holding it)."""
    if not _turn.acquire(timeout=_patience["s"]):
        raise TimeoutError(f"an emulated worker waited {_patience['s']:.0f} s for its turn (collective_timeout_s)")
    _state.turn = True
    if _state.rng is not None:
        _set_rng_state(_state.rng)


def _rng_state() -> tuple:
    """The default generators' states: the CPU one's, and each initialised GPU's."""
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None


def _set_rng_state(state: tuple) -> None:
    cpu, gpus = state
    torch.set_rng_state(cpu)
    if gpus is not None:
        torch.cuda.set_rng_state_all(gpus)


def shared(key: tuple, load):
    """`load()`, once for every logical worker (what they only read, such as the training data); elsewhere, `load()`."""
    if not active():
        return load()
    with _shared_lock:
        if key not in _shared:
            _shared[key] = load()
        return _shared[key]


class Meeting:
    """Every worker of one run waits here for the others; each learns the instants (wall, process CPU) at which the
    last of them arrived. Between two meetings lies every worker's work in between and nothing else, whoever held
    the turn first."""

    def __init__(self, parties: int) -> None:
        self._barrier = threading.Barrier(parties, action=self._mark)
        self._at = (0.0, 0.0)

    def _mark(self) -> None:
        self._at = (time.perf_counter(), time.process_time())

    def __call__(self) -> tuple[float, float]:
        # no worker can leave the next meeting, whose action overwrites _at, before every worker has read this one's
        with waiting():
            self._barrier.wait(timeout=_patience["s"])
        return self._at


def meeting(run_id: str, parties: int) -> Meeting:
    """The meeting of run `run_id`'s `parties` workers, one object for all of them."""
    return shared(("meeting", run_id), lambda: Meeting(parties))


def _threaded():
    from torch.testing._internal.distributed import multi_threaded_pg as threaded

    return threaded


class _Mailboxes:
    """Tensors sent and not yet received, one queue per (group, source, destination, tag)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boxes: dict[tuple, queue.Queue] = {}

    def box(self, key: tuple) -> queue.Queue:
        with self._lock:
            return self._boxes.setdefault(key, queue.Queue())

    def clear(self) -> None:
        with self._lock:
            self._boxes.clear()


_MAIL = _Mailboxes()


# The group's collectives as the ledger names them, and which arguments hold the payload it books (the tensor of
# an all-reduce, the gathered output, the unreduced input of a reduce-scatter; suite/meters/comm.py)
_OUTPUT, _INPUT, _LARGER = (
    (lambda a: tensor_bytes(a[0])),
    (lambda a: tensor_bytes(a[1])),
    (lambda a: max(tensor_bytes(a[0]), tensor_bytes(a[1]))),
)
_COUNTED = {
    "allreduce": ("all_reduce", _OUTPUT),
    "allreduce_coalesced": ("all_reduce", _OUTPUT),
    "allgather": ("all_gather", _OUTPUT),
    "all_gather_single": ("all_gather", _OUTPUT),
    "all_gather_single_coalesced": ("all_gather", _OUTPUT),
    "broadcast": ("broadcast", _OUTPUT),
    "reduce_scatter": ("reduce_scatter", _INPUT),
    "reduce_scatter_single": ("reduce_scatter", _INPUT),
    "reduce_scatter_single_coalesced": ("reduce_scatter", _INPUT),
    "alltoall": ("all_to_all", _LARGER),
    "all_to_all_single": ("all_to_all", _LARGER),
    "scatter": ("scatter", _LARGER),
    "gather": ("gather", _LARGER),
    "send": ("send", _OUTPUT),
    "recv": ("recv", _OUTPUT),
    "barrier": (None, None),  # a barrier is no traffic the ledger books (it skips them), though it all-reduces here
}


class _SumInRankOrder:
    """An all-reduce's SUM or AVG as one running sum, rank 0's tensor plus each other rank's in rank order.

    The threaded group's own stacks the K tensors first: 128 workers' gradients were a 1.5 GB buffer made anew
    at every all-reduce, a third of an emulated DDP step."""

    def __init__(self, op: dist.ReduceOp) -> None:
        self.average = op == dist.ReduceOp.AVG

    @torch.no_grad()
    def work(self, data: list[list[torch.Tensor]]) -> None:
        for i in range(len(data[0])):
            total = data[0][i].detach().clone()
            for rank in range(1, len(data)):
                total.add_(data[rank][i].detach())
            if self.average:
                total.div_(len(data))
            for tensors in data:
                tensors[i].detach().copy_(total)


def _counting(name: str, base):
    """`base` booked once in this thread's ledger: the group's own collectives call each other (an all-gather
    into one tensor is an all-gather of its chunks), and only the outermost call is the one the caller made."""
    op, payload = _COUNTED[name]

    def method(self, *args, **kwargs):
        if getattr(_state, "in_collective", False):
            return base(self, *args, **kwargs)
        if op is not None:
            comm.count(op, self.group_name, payload(args))
        _state.in_collective = True
        try:
            with waiting():
                return base(self, *args, **kwargs)
        finally:
            _state.in_collective = False

    return method


def _group_class():
    threaded = _threaded()

    class EmulatedGroup(threaded.ProcessLocalGroup):
        """The threaded group with point-to-point messages (`send` leaves a copy, `recv` waits for it), every call
        booked in the calling worker's ledger."""

        def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0):
            for t in tensors:
                _MAIL.box((self.pg_name, self._rank, dst, tag)).put(t.detach().clone())
            return threaded.ret_work(tensors)

        def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0):
            for t in tensors:
                with waiting():
                    sent = _MAIL.box((self.pg_name, src, self._rank, tag)).get()
                t.detach().copy_(sent)
            return threaded.ret_work(tensors)

        def allreduce(self, tensor_list: list[torch.Tensor], opts=None):
            op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
            if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                return threaded.ProcessLocalGroup.allreduce(self, tensor_list, opts)
            coll = threaded.ProcessLocalGroup._start_coll(_SumInRankOrder(op), self)
            done = coll.join(self._rank, tensor_list)
            threaded.ProcessLocalGroup._end_coll(coll, self)
            return done

        allreduce_coalesced = allreduce

        def getBackendName(self) -> str:
            return BACKEND

    for name in _COUNTED:
        setattr(EmulatedGroup, name, _counting(name, getattr(EmulatedGroup, name)))
    return EmulatedGroup


def _register() -> None:
    if BACKEND in dist.Backend.backend_list:
        return
    threaded, group = _threaded(), _group_class()

    def create(store, rank: int, world_size: int, timeout):
        with waiting():
            threaded._store_based_barrier(rank, store, "", world_size, timeout)
        return group(rank, world_size)

    dist.Backend.register_backend(BACKEND, create, devices=["cpu", "cuda"])


class WorkerFailed(RuntimeError):
    """A logical worker raised; the first one's error, named by its rank."""


def run_threads(cfg: RunConfig, work) -> Path:
    """`work(cfg)` in cfg.nproc logical workers, each a thread with its own copy of `cfg` and rank in one threaded
    world; returns the record's path. The first failure wakes the workers waiting in a collective and is raised as
    WorkerFailed("worker R: ...") once every thread has ended."""
    threaded = _threaded()
    _register()
    _patience["s"] = cfg.collective_timeout_s
    torch._C._distributed_c10d._set_thread_isolation_mode(True)  # group names are per thread
    threaded._install_threaded_pg()
    store = dist.HashStore()
    failures: list[tuple[int, BaseException]] = []

    def logical_worker(rank: int) -> None:
        _state.emulated, _state.rng = True, None
        comm.count_in_backend()
        try:
            _take_turn()
            dist.init_process_group(BACKEND, rank=rank, world_size=cfg.nproc, store=store)
            work(copy.deepcopy(cfg))
        except BaseException as err:  # noqa: BLE001  (every failure ends the run; the first is the one raised)
            if not failures:
                failures.append((rank, err))
            threaded.ProcessLocalGroup.exception_handle(err)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
            if getattr(_state, "turn", False):
                _give_turn()

    threads = [threading.Thread(target=logical_worker, args=(r,), name=f"worker-{r}") for r in range(cfg.nproc)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        threaded.ProcessLocalGroup.reset()
        _MAIL.clear()
        _shared.clear()
        threaded._uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        gc.collect()  # the workers' cycles, once for all of them (suite/run/train.py _end_process_groups)
    if failures:
        rank, err = failures[0]
        raise WorkerFailed(f"worker {rank}: {type(err).__name__}: {err}") from err
    return cfg.record_path()
