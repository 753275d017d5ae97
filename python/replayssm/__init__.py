"""replayssm for PyTorch: the Mamba-2 / Gated DeltaNet decode ops of libreplayssm_c.so as torch custom
ops (replayssm.ops, torch.ops.replayssm.*), and cache helpers (replayssm.cache). See docs/python.md."""
import ctypes

from . import ops
import torch

from ._lib import ReplaySSMError, call, dl_dtype, lib
from .cache import GdnReplayCaches, Mamba2ReplayCaches
from .ops import HAS_CUSTOM_OP

__version__ = lib.replayssm_version().decode()


def built_with_cuda():
    """True when the loaded library has the CUDA kernels."""
    return bool(lib.replayssm_built_with_cuda())


def cuda_device_problem(device=0):
    """"" when the loaded library's CUDA kernels run on CUDA device `device`, else why not (a GPU older than
    compute capability 9.0, or one the build has no code for: configure with REPLAYSSM_CUDA_PTX=ON). Every op on
    CUDA tensors asks this first and raises ReplaySSMError with the answer; an engine may ask at start-up."""
    return lib.replayssm_cuda_device_problem(int(device)).decode()


def library_path():
    return lib.path


def set_device_validation(on):
    """Range-check CUDA index/cursor tensors on the host before each op (a device-to-host copy and a
    sync; skipped while capturing). Off by default; also REPLAYSSM_VALIDATE_DEVICE=1."""
    lib.replayssm_set_device_validation(int(bool(on)))


def device_validation():
    return bool(lib.replayssm_device_validation())


def _preset(fn, name):
    g = (ctypes.c_int32 * 4)()
    call(fn, name.encode(), g)
    return tuple(g)


def mamba2_preset(name):
    """(heads, headdim, dstate, groups) of a production preset, e.g. "nemotron3-super-120b"."""
    return _preset("replayssm_mamba2_preset", name)


def gdn_preset(name):
    """(k_heads, v_heads, head_k_dim, head_v_dim) of a production preset, e.g. "qwen3.5-4b"."""
    return _preset("replayssm_gdn_preset", name)


def mamba2_best_spec_history(geometry, history, window, state_dtype=torch.float32, act_dtype=torch.bfloat16):
    """The speculative history within the ring of (history, window) (next_pow2(history + window) entries: no more
    memory) whose verify + commit moves the fewest bytes by count; geometry = (heads, headdim, dstate, groups)."""
    h = ctypes.c_int32()
    call("replayssm_mamba2_best_spec_history", *geometry, history, window, dl_dtype(state_dtype), dl_dtype(act_dtype),
         ctypes.byref(h))
    return h.value


def gdn_best_spec_history(geometry, history, window, state_dtype=torch.float32, act_dtype=torch.bfloat16,
                          ring_dtype=torch.float32, gate_width=1):
    """As mamba2_best_spec_history for GDN, but never longer than `history` (the CUDA verify keeps the history in
    shared memory: longer ones measured slower); geometry = (k_heads, v_heads, head_k_dim, head_v_dim), gate_width 1
    (per-head gates) or head_k_dim (per-channel)."""
    h = ctypes.c_int32()
    call("replayssm_gdn_best_spec_history", *geometry, history, window, dl_dtype(state_dtype), dl_dtype(act_dtype),
         dl_dtype(ring_dtype), gate_width, ctypes.byref(h))
    return h.value


__all__ = ["ReplaySSMError", "ops", "Mamba2ReplayCaches", "GdnReplayCaches", "HAS_CUSTOM_OP", "built_with_cuda",
           "cuda_device_problem", "library_path", "set_device_validation", "device_validation", "mamba2_preset",
           "gdn_preset", "mamba2_best_spec_history", "gdn_best_spec_history"]
