"""Loads libreplayssm_c.so with ctypes and calls it with DLTensor views of torch tensors (no copies).

The library is found at $REPLAYSSM_LIBRARY, else next to this package (pip install), else in a
build folder of the source tree (the newest ``build*/libreplayssm_c.so``).
"""
import ctypes
import glob
import os

import torch

_LIB_NAME = "libreplayssm_c.so"


class ReplaySSMError(RuntimeError):
    """A replayssm op refused its arguments (or the device failed). The message is the C++ one,
    starting with the argument's name ("in.x: expected shape ..."); ``argument`` holds that name."""

    def __init__(self, message, argument=""):
        super().__init__(message)
        self.argument = argument


# ---- DLPack ABI (dlpack/dlpack.h): DLTensor and its parts ----
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


kDLCPU, kDLCUDA = 1, 2
_kDLInt, _kDLUInt, _kDLFloat, _kDLBfloat, _kDLComplex, _kDLBool = 0, 1, 2, 4, 5, 6


def _dl_dtype(dt, itemsize):
    bits = itemsize * 8
    if dt == torch.bfloat16:
        return _kDLBfloat, bits
    if dt == torch.bool:
        return _kDLBool, bits
    if dt.is_complex:
        return _kDLComplex, bits
    if dt.is_floating_point:
        return _kDLFloat, bits
    return (_kDLUInt if str(dt).startswith("torch.uint") else _kDLInt), bits


def dl_dtype(dt):
    """The DLDataType of torch dtype ``dt``."""
    code, bits = _dl_dtype(dt, torch.empty((), dtype=dt).element_size())
    return DLDataType(code, bits, 1)


def dltensor(t):
    """A DLTensor describing torch tensor ``t`` in place (it keeps its shape/stride arrays alive)."""
    d = DLTensor()
    n = t.dim()
    shape = (ctypes.c_int64 * n)(*t.shape)
    strides = (ctypes.c_int64 * n)(*t.stride())
    d.data = t.data_ptr() or None
    if t.device.type == "cuda":
        d.device = DLDevice(kDLCUDA, t.device.index or 0)
    elif t.device.type == "cpu":
        d.device = DLDevice(kDLCPU, 0)
    else:  # the C++ side names the tensor and rejects the device
        d.device = DLDevice(0, 0)
    d.ndim = n
    code, bits = _dl_dtype(t.dtype, t.element_size())
    d.dtype = DLDataType(code, bits, 1)
    d.shape, d.strides = shape, strides
    d._keep = (shape, strides)
    return d


# ---- the library ----
_T = ctypes.POINTER(DLTensor)
_I, _F, _P, _S = ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_char_p
_M2 = [_I] * 4 + [_T] * 8 + [_I]  # geometry, x dt B C z A dt_bias D, dt_softplus (after any op scalars)
_GDN = [_I] * 4 + [_T] * 7 + [_F, _I]  # geometry, q k v a b A_log dt_bias, scale, qk_l2norm

_SIGNATURES = {
    # name: (argtypes, restype)
    "replayssm_version": ([], _S),
    "replayssm_c_abi_version": ([], _I),
    "replayssm_built_with_cuda": ([], _I),
    "replayssm_cuda_device_count": ([], _I),
    "replayssm_cuda_device_problem": ([_I], _S),
    "replayssm_set_device_validation": ([_I], None),
    "replayssm_device_validation": ([], _I),
    "replayssm_set_launch_pdl": ([_I], None),
    "replayssm_launch_pdl": ([], _I),
    "replayssm_last_error": ([], _S),
    "replayssm_last_error_argument": ([], _S),
    "replayssm_mamba2_preset": ([_S, ctypes.POINTER(ctypes.c_int32)], _I),
    "replayssm_gdn_preset": ([_S, ctypes.POINTER(ctypes.c_int32)], _I),
    "replayssm_mamba2_best_spec_history": ([_I] * 6 + [DLDataType] * 2 + [ctypes.POINTER(ctypes.c_int32)], _I),
    "replayssm_gdn_best_spec_history": ([_I] * 6 + [DLDataType] * 3 + [_I, ctypes.POINTER(ctypes.c_int32)], _I),
    "replayssm_mamba2_decode": (_M2 + [_T] * 3 + [_P], _I),
    "replayssm_mamba2_replay_decode": (_M2[:4] + [_I] + _M2[4:] + [_T] * 7 + [_P], _I),
    "replayssm_mamba2_materialize": ([_I] * 4 + [_T] * 7 + [_P], _I),
    "replayssm_mamba2_export_state": ([_I] * 4 + [_T] * 9 + [_P], _I),
    "replayssm_mamba2_spec_verify": (_M2[:4] + [_I, _I] + _M2[4:] + [_T] * 8 + [_P], _I),
    "replayssm_mamba2_spec_verify_tree": (_M2[:4] + [_I, _I] + _M2[4:] + [_T] * 9 + [_P], _I),
    "replayssm_mamba2_accept_tree_path": ([_I] * 6 + [_T] * 9 + [_P], _I),
    "replayssm_mamba2_classic_spec_decode": (_M2[:4] + [_I] + _M2[4:] + [_T] * 5 + [_P], _I),
    "replayssm_gdn_decode": (_GDN + [_T] * 3 + [_P], _I),
    "replayssm_gdn_replay_decode": (_GDN + [_T] * 7 + [_P], _I),
    "replayssm_gdn_materialize": ([_I] * 4 + [_T] * 6 + [_P], _I),
    "replayssm_gdn_export_state": ([_I] * 4 + [_T] * 8 + [_P], _I),
    "replayssm_gdn_spec_verify": (_GDN[:4] + [_I, _I] + _GDN[4:] + [_T] * 8 + [_P], _I),
    "replayssm_gdn_spec_verify_tree": (_GDN[:4] + [_I, _I] + _GDN[4:] + [_T] * 9 + [_P], _I),
    "replayssm_gdn_accept_tree_path": ([_I] * 6 + [_T] * 9 + [_P], _I),
    "replayssm_gdn_classic_spec_decode": (_GDN[:4] + [_I] + _GDN[4:] + [_T] * 5 + [_P], _I),
    "replayssm_advance_cursors": ([_T, _T, _I, _P], _I),
    "replayssm_commit_cursors": ([_T, _T, _T, _T, _I, _I, _P], _I),
    "replayssm_reset_cursors": ([_T, _T, _P], _I),
    "replayssm_load_checkpoint": ([_T, _I, _T], _I),
}


def _candidates():
    env = os.environ.get("REPLAYSSM_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    built = sorted(glob.glob(os.path.join(repo, "build*", _LIB_NAME)), key=os.path.getmtime, reverse=True)
    return [os.path.join(here, _LIB_NAME)] + built


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            for name, (args, res) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = args, res
            lib.path = path
            return lib
        tried.append(path)
    raise ImportError(
        f"replayssm: {_LIB_NAME} not found (tried {tried}); build it with "
        "`ninja -C <build dir> replayssm_c` and set REPLAYSSM_LIBRARY to its path"
    )


lib = _load()


def _raise():
    raise ReplaySSMError(lib.replayssm_last_error().decode(), lib.replayssm_last_error_argument().decode())


def call(name, *args):
    """Calls C function ``name``: torch tensors become DLTensor pointers (byref keeps each alive for
    the call), None a null pointer. Raises ReplaySSMError with the C++ message on failure."""
    conv = [ctypes.byref(dltensor(a)) if isinstance(a, torch.Tensor) else a for a in args]
    if getattr(lib, name)(*conv) != 0:
        _raise()


def launch(name, device, *args):
    """call() for an op, with the stream argument appended: the current torch stream of ``device``
    when it is a GPU (so the op is ordered with, and captured like, the surrounding torch work)."""
    if device.type != "cuda":
        return call(name, *args, None)
    with torch.cuda.device(device):
        return call(name, *args, ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream))
