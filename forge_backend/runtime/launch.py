"""Load a cubin and launch a candidate's plan on PyTorch's current stream, with PyTorch tensors.

Note [host overhead]
Everything that depends only on the signature (grid, block, shared memory, integer and float arguments, output
and scratch sizes) is resolved once when the launcher is built. A call then only: checks pointer alignment (the
precondition the signature cannot see), allocates outputs with the caching allocator, writes the tensor pointers
into pre-built ctypes parameter slots and calls cuLaunchKernel with the address of that array. The launcher falls
back to the original ATen op when a precondition fails.

Note [a kernel called with tensors on another GPU]
A launcher is built for one device: its module is loaded into that device's context, its launches go to that
device's current stream and its scratch lives there. The provider builds it for the current device at compile time,
but a model may run on another GPU of the host (``model.to("cuda:1")`` without ``torch.cuda.set_device(1)``), and
Inductor calls a graph under a guard of the graph's device while an eager graph calls it under none. Launched as it
was, the kernel would run on the wrong GPU's stream, with pointers into another GPU's memory. So a call whose first
input is on another GPU goes to a sibling launcher of that GPU (the same card, candidate and cubin, loaded there once,
under a device guard, as is each of its calls): same-arch GPUs, since the card's arch is that of the tensors' GPU and
the cubin was built for it. The sibling resolves the plan for its own GPU, whose SM count may differ (Note [the
GPU's SM count in a plan] in contract.py). A sibling that cannot be built (another arch's GPU refuses the cubin)
leaves that GPU's calls to PyTorch's op (the fallback), logged once. Counted as ``kforge.other_gpu_calls`` and
``kforge.other_gpu_fallback``.

Note [a launch the driver refuses at call time]
A kernel verified on one GPU can be refused when a model calls it on another, or on the same GPU under other limits: a
cooperative grid of 132 blocks (the resident and lag layouts, two shipped relay records) from a record imported with
``--trust`` or kept in a cache shared by GPUs of one arch but other SM counts, or a grid resolved for the whole GPU and
launched where only some of its SMs are given (a green context of ``torch.cuda.green_contexts`` current at the call: the
driver refuses cooperative grids past the context's SMs, tests/test_green_context_gpu.py); shared memory or a cluster
shape the GPU does not offer. The driver says so at the launch, with an error that leaves the context usable
(``REFUSALS``), and nothing of that launch runs. A launcher with a fallback then runs PyTorch's op for that call and
every later one (a refusal is a property of the launch and the GPU, and a plan of several launches may have run its
first ones: the launcher's kept scratch is not to be trusted again), logs it once with the driver's error and counts
``kforge.launch_fallback``. Any other launch error (a sticky one from an earlier kernel, a lost context) is raised as
before: PyTorch's op could not run there either. Under a CUDA graph capture a first refusal is raised too (a failed
launch may invalidate the capture); once refused, a launcher captures PyTorch's op instead. The verifier calls
``launch_into``, which raises every error, so a search still records a refused candidate as a launch failure.

Note [a plan resolved for SMs it was not verified on]
A plan that names ``num_sms`` (Note [the GPU's SM count in a plan] in contract.py) resolves to another kernel
configuration for every SM count, and the relay's kernel returns without writing where its progress rule fails for its
grid. A record was verified at the SM count of the GPU that searched or re-verified it, the whole GPU's; a launcher
built where a green context of that GPU is current takes the context's count, and a sibling on another GPU of the same
arch takes that GPU's. Run unverified, such a launch could hand a model outputs it never wrote. So a launcher whose plan
resolves differently at its default count than at the count it was verified at (``verified_sms``: the GPU's, or a
sibling's parent's) runs the verifier once as it is built (counted as ``kforge.verified_at_sm_count``). If the kernel
fails it, the launcher's calls run PyTorch's op, with one warning (as a refused launch does), or without a fallback the
build raises. A count given explicitly (``num_sms``, as the tests give it) is the caller's to verify.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch._dynamo.utils import counters

from ..cards import OperatorCard
from ..contract import Candidate, ResolvedLaunch, resolve_plan
from ..errors import CandidateFailure, ContractViolation, PlanError, ToolchainUnavailable
from ..registry import conform
from ..signature import TensorSpec, layout_key_of, to_dtype

log = logging.getLogger("kforge")
_CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}
# Note [a launch the driver refuses at call time]: the driver's errors that refuse a launch's configuration on this
# GPU and leave the context usable
REFUSALS = frozenset({"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                      "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_INVALID_CLUSTER_SIZE"})


class LaunchRefused(CandidateFailure):
    """The driver refused a launch's configuration on this GPU (Note [a launch the driver refuses at call time]);
    a launch failure like any other to the verifier."""

    def __init__(self, message: str) -> None:
        super().__init__("launch", message)


def refuses(err: object) -> bool:
    """Whether the driver's result ``err`` (a CUresult) is one of ``REFUSALS``."""
    return getattr(err, "name", str(err).rsplit(".", 1)[-1]) in REFUSALS


@functools.lru_cache(maxsize=1)
def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ToolchainUnavailable("cuda-python (cuda.bindings) is not installed") from e
    return driver


def _check(result: tuple, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call {what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


def _ensure_context(device: torch.device) -> None:
    """Make PyTorch's primary context current on this thread, so modules load into the context torch uses."""
    torch.cuda.init()
    drv = _driver()
    ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(ctx) == 0:
        dev = _check(drv.cuDeviceGet(device.index or 0), "cuDeviceGet")
        primary = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(drv.cuCtxSetCurrent(primary), "cuCtxSetCurrent")


def context_sm_count(index: int) -> int:
    """The SMs a launch on GPU ``index`` may use from this thread (Note [the GPU's SM count in a plan] in
    contract.py): a green context's own share where one of that GPU is current (``torch.cuda.green_contexts``: its
    cooperative launches are refused past it, Note [a launch the driver refuses at call time]), else every SM of the
    GPU."""
    drv = _driver()
    try:
        ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(ctx) and int(_check(drv.cuCtxGetDevice(), "cuCtxGetDevice")) == index:
            sm = drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
            return int(_check(drv.cuCtxGetDevResource(ctx, sm), "cuCtxGetDevResource").sm.smCount)
    except (RuntimeError, AttributeError) as e:  # a driver or bindings without green contexts (CUDA < 12.4)
        log.debug("kforge: no SM count of the current context (%s); the GPU's is used", e)
    return torch.cuda.get_device_properties(index).multi_processor_count


class KeptBuffer:
    """A persistent scratch buffer (Note [scratch kept between launches] in contract.py), zeroed on ``stream`` when
    made. It is allocated with the driver, outside PyTorch's caching allocator: a launcher first called in a CUDA
    graph's warm-up (Inductor's cudagraph trees) would otherwise keep a block of the graph's private pool alive, which
    cudagraph trees refuse ("tensors in the cudagraph pool not tracked as outputs"). Freed with its launcher."""

    def __init__(self, nbytes: int, stream: int, device: torch.device) -> None:
        _ensure_context(device)
        drv = _driver()
        self.nbytes = nbytes
        self.ptr = int(_check(drv.cuMemAlloc(nbytes), "cuMemAlloc"))
        self._free = weakref.finalize(self, _free_device_memory, self.ptr)
        _check(drv.cuMemsetD8Async(self.ptr, 0, nbytes, stream), "cuMemsetD8Async")

    @classmethod
    def beside_a_capture(cls, nbytes: int, device: torch.device) -> "KeptBuffer":
        """A buffer for a launch being captured into a CUDA graph, zeroed now and outside the graph (Note [a
        persistent scratch in a CUDA graph]): allocated and zeroed on a stream of its own, which is not capturing,
        with this thread's capture mode relaxed for those calls only. Raises RuntimeError where the driver refuses."""
        drv = _driver()
        relaxed = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        previous = _check(drv.cuThreadExchangeStreamCaptureMode(relaxed), "cuThreadExchangeStreamCaptureMode")
        try:
            side = _check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            try:
                buf = cls(nbytes, int(side), device)
                _check(drv.cuStreamSynchronize(side), "cuStreamSynchronize")
            finally:
                drv.cuStreamDestroy(side)
        finally:
            drv.cuThreadExchangeStreamCaptureMode(previous)
        return buf

    def data_ptr(self) -> int:
        return self.ptr

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}


def _free_device_memory(ptr: int) -> None:
    try:
        _driver().cuMemFree(ptr)
    except Exception:  # pragma: no cover - interpreter shutdown: the context may be gone
        pass


@dataclass
class LoadedModule:
    module: object
    functions: dict[str, object]


def load_module(cubin: bytes, kernel_names: Sequence[str], device: torch.device) -> LoadedModule:
    _ensure_context(device)
    drv = _driver()
    module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    funcs = {name: _check(drv.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
             for name in kernel_names}
    return LoadedModule(module, funcs)


class _ParamBlock:
    """ctypes storage for one launch's parameters; pointer slots are rewritten on every call."""

    def __init__(self, launch: ResolvedLaunch) -> None:
        self.values = []
        self.pointer_slots: list[tuple[ctypes.c_void_p, str, object]] = []
        for kind, payload in launch.args:
            if kind in _CTYPES:
                v = _CTYPES[kind](payload)
            else:
                v = ctypes.c_void_p(0)
                self.pointer_slots.append((v, kind, payload))
            self.values.append(v)
        self.array = (ctypes.c_void_p * max(len(self.values), 1))(
            *[ctypes.addressof(v) for v in self.values])
        self.address = ctypes.addressof(self.array)


class Launcher:
    """Runs one candidate for one card. ``__call__(inputs)`` returns the used outputs (fresh tensors)."""

    def __init__(self, card: OperatorCard, candidate: Candidate, cubin: bytes, device: torch.device,
                 fallback: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]] | None = None,
                 num_sms: int | None = None, verified_sms: int | None = None) -> None:
        """``num_sms``: the SM count the plan's ``num_sms`` takes (Note [the GPU's SM count in a plan] in
        contract.py), by default the current context's (``context_sm_count``); tests pass fewer to run a kernel as a
        smaller GPU would. ``verified_sms``: the SM count the kernel was verified at, by default the GPU's (a sibling
        passes its parent's); a plan resolved by default for another count is verified once more here (Note [a plan
        resolved for SMs it was not verified on])."""
        self.card, self.candidate, self.device = card, candidate, device
        self._device_index = device.index if device.index is not None else torch.cuda.current_device()
        if verified_sms is None:
            verified_sms = torch.cuda.get_device_properties(self._device_index).multi_processor_count
        chosen = num_sms is not None
        if num_sms is None:
            num_sms = context_sm_count(self._device_index)
        try:
            self.launches, self.scratch = resolve_plan(candidate, card.sizes, card.floats, num_sms)
            unverified = not chosen and num_sms != verified_sms and \
                resolve_plan(candidate, card.sizes, card.floats, verified_sms) != (self.launches, self.scratch)
        except (PlanError, ContractViolation) as e:
            raise CandidateFailure("plan", str(e)) from e
        self._num_sms, self._verified_sms = num_sms, verified_sms
        self.module = load_module(cubin, sorted({l.kernel for l in self.launches}), device)
        self.out_specs: list[TensorSpec] = [t.spec for t in card.outputs]
        self.out_index = {int(t.name.removeprefix("out")): i for i, t in enumerate(card.outputs)}
        self.in_index = {t.name: i for i, t in enumerate(card.inputs)}
        self.align = max(candidate.requires_align, 1)
        self.fallback = fallback
        self._out_alloc = [(s.shape, s.stride, to_dtype(s.dtype)) for s in self.out_specs]  # hot path: no lookups
        self._in_strides = [tuple(t.spec.stride) for t in card.inputs]
        self._in_layouts = [t.spec.layout_key() for t in card.inputs]
        self._blocks = [_ParamBlock(l) for l in self.launches]
        self._lock = threading.Lock()
        self._has_persistent = any(s.persist for s in self.scratch)
        self._kept: dict[int, dict[str, KeptBuffer]] = {}  # stream -> its persistent scratch buffers
        self._graph_kept: list[KeptBuffer] = []  # the persistent buffers of launches captured into CUDA graphs
        self._graph_refused = False
        self._cubin = cubin
        self._siblings: dict[int, Launcher | None] = {}  # Note [a kernel called with tensors on another GPU]
        # why PyTorch's op runs in the kernel's place: the driver refused its launch (Note [a launch the driver
        # refuses at call time]) or it failed the verifier at this SM count (Note [a plan resolved for SMs it was not
        # verified on])
        self.refused: str | None = None
        self._raise_smem_limits()
        self._validate_pointers()
        if unverified:
            self._verify_at_this_count()

    def _verify_at_this_count(self) -> None:
        """Note [a plan resolved for SMs it was not verified on]: run the verifier on this launcher once; where the
        kernel fails it (or cannot be verified, under a CUDA graph capture) its calls run PyTorch's op, or without a
        fallback a CandidateFailure is raised."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from ..verify import verify

        counters["kforge"]["verified_at_sm_count"] += 1
        if torch.cuda.is_current_stream_capturing():
            why = "it cannot be verified under a CUDA graph capture"
        else:
            with unset_fake_temporarily():  # built while a compile traces: the verifier's tensors are real ones
                rep = verify(self.card, self.launch_into, self.allocate_outputs, self.device)
            if rep.ok:
                log.info("kforge: kernel %s of %s verified on the %d SMs of this context", self.card.key[:12],
                         self.card.op, self._num_sms)
                return
            why = f"it failed the verifier there ({rep.failed_check}: {rep.message})"
        message = (f"kernel {self.card.key[:12]} of {self.card.op}, verified on {self._verified_sms} SMs, is not used "
                   f"on the {self._num_sms} SMs of this context: {why}")
        if self.fallback is None:
            raise CandidateFailure("verify", message)
        self.refused = message
        log.warning("kforge: %s; PyTorch's op runs in its place", message)

    def _raise_smem_limits(self) -> None:
        """Opt in to the dynamic shared memory each launch asks for, and to cluster sizes over 8 (sm_90 allows 16 as
        a non-portable size; a kernel declares its cluster shape with ``__cluster_dims__``). The opt-in is made for
        any dynamic size, not only above 48 KB: the default limit is 48 KB *including* the kernel's static
        ``__shared__``, so exactly 48 KB of dynamic memory beside a reduction scratch fails to launch (the cluster
        group norm at [2, 1536, 64, 64] bf16, cs=8, on the H200)."""
        drv = _driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        cluster = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        clusters = "__cluster_dims__" in self.candidate.source
        for l in self.launches:
            fn = self.module.functions[l.kernel]
            if l.smem > 0:
                _check(drv.cuFuncSetAttribute(fn, attr, l.smem), "cuFuncSetAttribute")
            if clusters:
                _check(drv.cuFuncSetAttribute(fn, cluster, 1), "cuFuncSetAttribute(non-portable cluster size)")

    def _validate_pointers(self) -> None:
        for block in self._blocks:
            for _, kind, payload in block.pointer_slots:
                if kind == "in" and payload not in self.in_index:
                    raise CandidateFailure("plan", f"plan reads input {payload!r}; card inputs: {list(self.in_index)}")
                if kind == "out" and payload not in self.out_index:
                    raise CandidateFailure("plan", f"plan writes output {payload}; used outputs: {list(self.out_index)}")

    def allocate_outputs(self, strides: Sequence[Sequence[int]] | None = None) -> list[torch.Tensor]:
        """Fresh outputs with the card's strides, or with ``strides`` (which must differ from the card's on size-1
        dimensions only: the kernel indexes every other dimension with the strides baked into it)."""
        if strides is None:
            return [torch.empty_strided(shape, stride, dtype=dtype, device=self.device)
                    for shape, stride, dtype in self._out_alloc]
        return [torch.empty_strided(shape, stride, dtype=dtype, device=self.device)
                for (shape, _, dtype), stride in zip(self._out_alloc, strides)]

    def aligned(self, tensors: Sequence[torch.Tensor]) -> bool:
        a = self.align
        return a <= 1 or all(t.data_ptr() % a == 0 for t in tensors)

    def laid_out(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Every input has the strides the kernel was generated for (size-1 dims aside). The exact-stride compare
        is the fast path on every call; the size-1-insensitive one runs only when it fails."""
        for t, strides, want in zip(inputs, self._in_strides, self._in_layouts):
            if t.stride() != strides and layout_key_of(t) != want:
                return False
        return True

    def __call__(self, inputs: Sequence[torch.Tensor],
                 out_strides: Sequence[Sequence[int]] | None = None) -> list[torch.Tensor]:
        """The used outputs, fresh, with the card's strides or ``out_strides`` (see ``allocate_outputs``)."""
        index = inputs[0].get_device() if inputs else self._device_index
        if index != self._device_index:  # Note [a kernel called with tensors on another GPU]
            sibling = self._sibling(index) if index >= 0 else None
            if sibling is None:  # a CPU tensor, or a GPU that refused the cubin
                return self._pytorch(inputs, out_strides, "other_gpu_fallback",
                                     f"kernel built for cuda:{self._device_index} called with tensors on "
                                     f"{inputs[0].device}")
            counters["kforge"]["other_gpu_calls"] += 1
            with torch.cuda.device(index):
                return sibling(inputs, out_strides)
        if self.refused is not None:  # Note [a launch the driver refuses at call time]
            return self._pytorch(inputs, out_strides, "launch_fallback", self.refused)
        if not self.aligned(inputs) or not self.laid_out(inputs):
            # Note [kernel inputs keep their layout] in rewrite.py: a kernel indexes memory with the strides
            # baked in from its signature, so another layout (or a misaligned pointer) runs PyTorch's op instead
            return self._pytorch(inputs, out_strides, "layout_fallback",
                                 f"an input is not aligned to {self.align} bytes or not laid out as the signature says")
        outputs = self.allocate_outputs(out_strides)
        try:
            self.launch_into(inputs, outputs)
        except LaunchRefused as e:
            if self.fallback is None or torch.cuda.is_current_stream_capturing():
                raise
            self.refused = e.message
            log.warning("kforge: the driver refused kernel %s of %s on cuda:%d (%s); PyTorch's op runs in its place "
                        "from now on", self.card.key[:12], self.card.op, self._device_index, e.message)
            return self._pytorch(inputs, out_strides, "launch_fallback", e.message)
        counters["kforge"]["kernel_calls"] += 1
        return outputs

    def _pytorch(self, inputs: Sequence[torch.Tensor], out_strides: Sequence[Sequence[int]] | None, counter: str,
                 why: str) -> list[torch.Tensor]:
        """PyTorch's op (the fallback) in place of the kernel, its outputs with the card's strides or
        ``out_strides``, counted as ``kforge.<counter>``; without a fallback, a launch failure saying ``why``."""
        if self.fallback is None:
            raise CandidateFailure("launch", why)
        counters["kforge"][counter] += 1
        specs = self.out_specs if out_strides is None else [TensorSpec(s.shape, tuple(st), s.dtype)
                                                            for s, st in zip(self.out_specs, out_strides)]
        return conform(self.fallback(inputs), specs)

    def _sibling(self, index: int) -> "Launcher | None":
        with self._lock:
            if index not in self._siblings:
                try:
                    with torch.cuda.device(index):
                        self._siblings[index] = Launcher(self.card, self.candidate, self._cubin,
                                                         torch.device("cuda", index), self.fallback,
                                                         verified_sms=self._verified_sms)
                except (CandidateFailure, RuntimeError) as e:
                    log.warning("kforge: kernel %s (built for cuda:%d) could not be loaded on cuda:%d (%s); PyTorch's "
                                "%s runs there", self.card.key[:12], self._device_index, index, e, self.card.op)
                    self._siblings[index] = None
            return self._siblings[index]

    def _scratch_buffers(self, stream: int) -> dict[str, torch.Tensor | KeptBuffer]:
        """This launch's scratch: fresh buffers (zeroed where the plan asks), and for a persistent one the stream's
        own buffer, zeroed on its first launch there (Note [scratch kept between launches] in contract.py). A launch
        being captured into a CUDA graph gets a persistent buffer of its own, zeroed outside the graph, which its
        replays keep (Note [a persistent scratch in a CUDA graph])."""
        capturing = self._has_persistent and torch.cuda.is_current_stream_capturing()
        kept = self._kept.setdefault(stream, {}) if self._has_persistent and not capturing else {}
        out: dict[str, torch.Tensor | KeptBuffer] = {}
        for s in self.scratch:
            if s.persist and not capturing:
                if s.name not in kept:
                    kept[s.name] = KeptBuffer(max(s.nbytes, 1), stream, self.device)
                out[s.name] = kept[s.name]
            elif s.persist and (graph_buffer := self._graph_buffer(max(s.nbytes, 1))) is not None:
                out[s.name] = graph_buffer
            else:
                out[s.name] = (torch.zeros if s.zero else torch.empty)(max(s.nbytes, 1), dtype=torch.uint8,
                                                                        device=self.device)
        return out

    def _graph_buffer(self, nbytes: int) -> KeptBuffer | None:
        """A persistent buffer for a launch being captured, kept as long as this launcher (the graph holds only its
        address); None once the driver refused one, and the launch then zeroes a fresh buffer inside the graph."""
        if self._graph_refused:
            return None
        try:
            buf = KeptBuffer.beside_a_capture(nbytes, self.device)
        except RuntimeError as e:
            log.info("kforge: no scratch outside the CUDA graph (%s); it is zeroed inside the graph", e)
            self._graph_refused = True
            return None
        self._graph_kept.append(buf)
        counters["kforge"]["graph_scratch_buffers"] += 1
        return buf

    def kept_scratch(self) -> dict[str, torch.Tensor]:
        """The current stream's persistent scratch buffers as the last launch left them (empty before the first),
        as uint8 tensors that share their memory."""
        kept = self._kept.get(torch._C._cuda_getCurrentRawStream(self._device_index), {})
        return {name: torch.as_tensor(buf, device=self.device) for name, buf in kept.items()}

    def launch_into(self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
        """Launch writing into caller-provided outputs (the verifier passes NaN-poisoned ones)."""
        stream = torch._C._cuda_getCurrentRawStream(self._device_index)
        drv = _driver()
        with self._lock:
            scratch = self._scratch_buffers(stream)
            for launch, block in zip(self.launches, self._blocks):
                for slot, kind, payload in block.pointer_slots:
                    if kind == "in":
                        slot.value = inputs[self.in_index[payload]].data_ptr()
                    elif kind == "out":
                        slot.value = outputs[self.out_index[payload]].data_ptr()
                    else:
                        slot.value = scratch[payload].data_ptr()
                fn = self.module.functions[launch.kernel]
                if launch.cooperative:  # every block resident at once, or an error (never a hang)
                    err = drv.cuLaunchCooperativeKernel(fn, *launch.grid, *launch.block, launch.smem, stream,
                                                        block.address)[0]
                else:
                    err = drv.cuLaunchKernel(fn, *launch.grid, *launch.block, launch.smem, stream, block.address, 0)[0]
                if int(err) != 0:
                    what = "cuLaunchCooperativeKernel" if launch.cooperative else "cuLaunchKernel"
                    why = f"{what}({launch.kernel}) failed: {err}"
                    raise LaunchRefused(why) if refuses(err) else CandidateFailure("launch", why)
