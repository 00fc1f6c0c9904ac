"""Two (or K) tick-tock Wavelet waves on ONE model and one device, as the trainer's `--waves K
--wave-consistency accumulate` (docs/algorithms.md, "Wavelet"; the gates of torch/waves/gates.h),
for scripts/gpu_wavelet_memory.py and its tests. Two ways to launch the same GPU-side work:

- `events` (default): ONE host thread enqueues every pass in the tick-tock order, each wave on
  its own CUDA stream, the gates being CUDA events only: tick's forward; tock's forward after
  tick's forward's end; tick's backward; tock's backward after tick's backward's end; the update
  after both backwards' gradients; the next round's forwards after the update's end. The host
  never waits for the device inside a run (autograd.grad returns once a CUDA backward is
  enqueued), so the device sees the same order as with `threads` without one GIL serialising
  two launching threads.
- `threads`: one Python thread per wave, passing the gates in turn under a condition variable
  (as the trainer's C++ threads do), each pass's stream also waiting for the gate's previous
  pass's end event.

Both give the same passes, events and arithmetic (the update: the waves' gradients summed in
wave order, times 1/K, one optimizer step, on the stream of the wave that hands in last; with
`events` that is always the last wave). On a CPU device the marks are the host clock.
"""

import threading
import time
from contextlib import contextmanager, nullcontext
from itertools import pairwise

import torch
import torch.nn.functional as F

WAIT_TIMEOUT_S = 300.0  # no gate or update wait is unbounded
LAUNCHES = ("events", "threads")


class Device:
    """A CUDA device's event marks, or on a CPU (all in order on the host) the host clock."""

    def __init__(self, device: torch.device):
        self.device, self.cuda = device, device.type == "cuda"

    def mark(self, stream=None):
        """A CUDA event recorded on `stream` (the current one if None), or the host clock."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def wait(self, stream, mark):
        if self.cuda and mark is not None:
            stream.wait_event(mark)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)


class TickTockGates:
    """WaveGates (torch/waves/gates.h): a forward and a backward gate, passed by the waves in
    turn, wave 0 first, and on the device (a pass's stream waits for the previous pass's end).
    Thread-safe; a wait ends within WAIT_TIMEOUT_S or at abort(). With one launching thread
    that passes them in order, no wait blocks. `passes`: every pass."""

    def __init__(self, waves: int, dev: Device):
        self.waves, self.dev = waves, dev
        self.cond = threading.Condition()
        self.turn = {"forward": 0, "backward": 0}
        self.last_end = {"forward": None, "backward": None}
        self.error, self.passes = None, []

    def wait(self, ready, what: str):
        """Waits (holding self.cond) until ready() or an abort."""
        if not self.cond.wait_for(lambda: self.error is not None or ready(), WAIT_TIMEOUT_S):
            raise TimeoutError(f"gpu_waves: {what} waited {WAIT_TIMEOUT_S:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"gpu_waves: {what}: another wave failed") from self.error

    def abort(self, error: BaseException):
        with self.cond:
            self.error = error
            self.cond.notify_all()

    @contextmanager
    def passing(self, phase: str, wave: int, rnd: int, stream):
        with self.cond:
            self.wait(lambda: self.turn[phase] == wave, f"wave {wave}'s {phase} gate")
            previous = self.last_end[phase]
        self.dev.wait(stream, previous)
        start = self.dev.mark(stream)
        yield
        end = self.dev.mark(stream)
        with self.cond:
            self.last_end[phase] = end
            self.turn[phase] = (wave + 1) % self.waves
            self.passes.append((wave, rnd, phase, start, end))
            self.cond.notify_all()


class WaveRunner:
    """K tick-tock waves on one model, accumulate consistency; batches[w]: wave w's (images,
    labels); launch: one of LAUNCHES. run() blocks until its rounds are enqueued (a device sync
    waits for their end); rounds go on where the last run() stopped."""

    def __init__(self, model, optimizer, batches, dev: Device, launch: str = "events"):
        if launch not in LAUNCHES:
            raise ValueError(f"gpu_waves: launch {launch!r} is not one of {LAUNCHES}")
        self.model, self.optimizer, self.batches, self.dev = model, optimizer, batches, dev
        self.launch = launch
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.waves = len(batches)
        self.streams = [torch.cuda.Stream(dev.device) if dev.cuda else None for _ in batches]
        self.gates = TickTockGates(self.waves, dev)
        # the first round of the next run(); the last round whose update is enqueued
        self.next_round, self.updated, self.update_end = 0, -1, None
        self.handed_in = {}  # round -> [(wave, gradients, ready mark)]
        self.updates = []  # (round, start mark, end mark)

    def run(self, rounds: int):
        first, self.next_round = self.next_round, self.next_round + rounds
        caller = torch.cuda.current_stream(self.dev.device) if self.dev.cuda else None
        for stream in self.streams if caller else []:  # after the caller's weights and data
            stream.wait_stream(caller)
        if self.launch == "events":
            for rnd in range(first, first + rounds):
                self._round_in_order(rnd)
        else:
            self._run_threads(range(first, first + rounds))
        for stream in self.streams if caller else []:  # the caller's later work after the waves
            caller.wait_stream(stream)

    def _on(self, wave: int):
        stream = self.streams[wave]
        return torch.cuda.stream(stream) if stream is not None else nullcontext()

    def _round_in_order(self, rnd: int):
        """`events`: every wave's forward, then every wave's backward (then the update)."""
        losses = []
        for wave in range(self.waves):
            with self._on(wave):
                losses.append(self._forward(wave, rnd))
        for wave in range(self.waves):
            with self._on(wave):
                grads = self._backward(wave, rnd, losses, wave)
                self._hand_in(rnd, wave, grads, self.streams[wave])
            del grads  # held by the hand-in until the update, not longer

    def _run_threads(self, rounds):
        errors = []

        def wave_thread(wave):
            try:
                with self._on(wave):
                    for rnd in rounds:
                        losses = [self._forward(wave, rnd)]
                        grads = self._backward(wave, rnd, losses, 0)
                        self._hand_in(rnd, wave, grads, self.streams[wave])
                        del grads  # not held into the next round's forward
            except BaseException as error:  # re-raised below
                errors.append(error)
                self.gates.abort(error)

        threads = [threading.Thread(target=wave_thread, args=(w,)) for w in range(self.waves)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _forward(self, wave: int, rnd: int):
        """The forward gate's pass (forward + loss), after round rnd - 1's update."""
        stream, (images, labels) = self.streams[wave], self.batches[wave]
        with self.gates.cond:
            self.gates.wait(lambda: self.updated >= rnd - 1, f"wave {wave}'s round {rnd}")
            update_end = self.update_end
        self.dev.wait(stream, update_end)
        with self.gates.passing("forward", wave, rnd, stream):
            return F.cross_entropy(self.model(images), labels)

    def _backward(self, wave: int, rnd: int, losses: list, index: int) -> list:
        """The backward gate's pass from losses[index], which it drops (and with it the graph,
        so that no autograd node outlives its round); returns the wave's gradients."""
        loss, losses[index] = losses[index], None
        with self.gates.passing("backward", wave, rnd, self.streams[wave]):
            return list(torch.autograd.grad(loss, self.params))

    def _hand_in(self, rnd: int, wave: int, grads, stream):
        ready = self.dev.mark(stream)
        with self.gates.cond:
            entries = self.handed_in.setdefault(rnd, [])
            entries.append((wave, grads, ready))
            if len(entries) < self.waves:
                return
            del self.handed_in[rnd]
        self._update(rnd, sorted(entries, key=lambda entry: entry[0]), stream)

    def _update(self, rnd: int, entries, stream):
        """One optimizer step from the mean of the waves' gradients, on this wave's stream."""
        for _, grads, ready in entries:
            self.dev.wait(stream, ready)
            for grad in grads if stream is not None else []:  # used (wave 0's written) here
                grad.record_stream(stream)
        start = self.dev.mark(stream)
        mean = entries[0][1]  # summed into wave 0's gradients, in wave order
        for _, grads, _ in entries[1:]:
            for total, grad in zip(mean, grads):
                total.add_(grad)
        for param, total in zip(self.params, mean):
            param.grad = total.mul_(1.0 / self.waves)
        self.optimizer.step()
        for param in self.params:
            param.grad = None
        end = self.dev.mark(stream)
        with self.gates.cond:
            self.updated, self.update_end = rnd, end
            self.updates.append((rnd, start, end))
            self.gates.cond.notify_all()

    def timeline(self, base, since: int = 0) -> dict:
        """Seconds since `base` of the passes and updates of rounds >= since (after a sync)."""
        s = lambda m: base.elapsed_time(m) / 1e3 if self.dev.cuda else m - base  # noqa: E731
        return {"passes": [{"wave": w, "round": r, "phase": p, "start": s(a), "end": s(b)}
                           for w, r, p, a, b in self.gates.passes if r >= since],
                "updates": [{"round": r, "start": s(a), "end": s(b)}
                            for r, a, b in self.updates if r >= since]}


def schedule_summary(timeline: dict) -> dict:
    """The share of tock's forward time beside tick's backward of the same round, and the
    largest overlap of two passes of one gate (<= 0 when the gates hold)."""
    at = {(p["wave"], p["round"], p["phase"]): p for p in timeline["passes"]}
    beside = tock = 0.0
    for (wave, rnd, phase), p in at.items():
        q = at.get((0, rnd, "backward"))
        if wave == 1 and phase == "forward" and q:
            tock += p["end"] - p["start"]
            beside += max(0.0, min(p["end"], q["end"]) - max(p["start"], q["start"]))
    by_start = sorted(timeline["passes"], key=lambda p: p["start"])
    same_gate = [a["end"] - b["start"] for phase in ("forward", "backward")
                 for a, b in pairwise(p for p in by_start if p["phase"] == phase)]
    return {"tock_forward_beside_tick_backward": beside / tock if tock else 0.0,
            "max_same_gate_overlap_s": max(same_gate, default=0.0)}


def one_wave(model, optimizer, batch, steps: int):
    """Ordinary steps (zero_grad, forward, loss, backward, step) on the current stream."""
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
