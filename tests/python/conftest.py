"""Shared helpers of the Python binding tests: devices, random inputs, error metric, tolerances, the
bad-input check. The float64 recurrences themselves live in the test files (test_mamba2.py,
test_gdn.py); the token-stream drivers both run them through live in streams.py (draft trees: trees.py)."""
import pytest
import torch

import replayssm
from replayssm import ReplaySSMError

pytest.register_assert_rewrite("streams", "trees")  # their asserts report their values as a test file's do

HAS_CUDA = torch.cuda.is_available() and replayssm.built_with_cuda()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
SENTINEL = -4096.0  # out of padding rows must keep it (exact in every float dtype)

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
SHORT = {torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
# (state, activation) dtype pairs; f64 runs on the CPU only.
DTYPE_PAIRS = [(torch.float32, torch.float32), (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16),
               (torch.float16, torch.float16), (torch.float64, torch.float64)]


def pair_id(p):
    return f"{SHORT[p[0]]}/{SHORT[p[1]]}"


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def skip_unsupported(device, dtypes):
    if device.type == "cuda" and torch.float64 in dtypes:
        pytest.skip("float64 runs on the CPU backend only")


def is16(dt):
    return dt in (torch.bfloat16, torch.float16)


def out_tol(state, act, ring=torch.float32):
    """Bound of max|got - ref| / max|ref|: fp32 arithmetic, the final rounding to the activation
    dtype, and rare one-ulp flips of 16-bit states / ring entries against the emulated truth."""
    if act == torch.float64:
        return 1e-6  # weights and dt_ring are float32 even then
    t = 2e-5 + 1.5 * UNIT_ROUNDOFF[act]
    if is16(state):
        t += 4 * UNIT_ROUNDOFF[state]
    if is16(ring):
        t += 2 * UNIT_ROUNDOFF[ring]
    return t


def state_tol(state, ring=torch.float32):
    if state == torch.float64:
        return 1e-6
    return 2e-5 + 4 * UNIT_ROUNDOFF[state] + (2 * UNIT_ROUNDOFF[ring] if is16(ring) else 0.0)


def rel_err(got, ref):
    got, ref = got.double().cpu(), ref.double().cpu()
    scale = ref.abs().max().item()
    return (got - ref).abs().max().item() / (scale if scale > 0 else 1.0)


def uniform(gen, shape, lo, hi):
    return torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo


def rounded(t, dtype):
    """float64 values rounded to `dtype` and back (what an op storing `dtype` keeps)."""
    return t.to(dtype).double()


def distinct_slots(gen, rows, slots, padding):
    """Row -> slot: distinct random slots, the last `padding` rows (and a shuffled pick) -1."""
    perm = torch.randperm(slots, generator=gen)[:rows].tolist()
    pad = torch.randperm(rows, generator=gen)[:padding].tolist()
    return [-1 if r in pad else perm[r] for r in range(rows)]


def snapshot(tensors):
    return [t.detach().clone() for t in tensors]


def assert_unchanged(before, tensors):
    """Bitwise equal (rings may hold NaN poison)."""
    for b, t in zip(before, tensors):
        assert torch.equal(b.contiguous().view(torch.uint8), t.contiguous().view(torch.uint8))


def assert_rejected(op, good, cases, written):
    """op(**good) with each (argument, change) of `cases` applied must raise ReplaySSMError naming that
    argument and write none of `written`; then op(**good) must run. Runs with device validation on:
    index values of CUDA tensors are checked on the host only then."""
    before = snapshot(written)
    was = replayssm.device_validation()
    replayssm.set_device_validation(True)
    try:
        for arg, change in cases:
            with pytest.raises(ReplaySSMError) as e:
                op(**dict(good, **change))
            assert e.value.argument == arg and str(e.value).startswith(arg + ":"), str(e.value)
            assert_unchanged(before, written)
    finally:
        replayssm.set_device_validation(was)
    op(**good)


def int32(values, device):
    return torch.tensor(values, dtype=torch.int32, device=device)


def shard(geo, tp):
    """Mamba2Geometry::shard: heads / tp, groups / tp (or 1 when tp is a multiple of groups)."""
    heads, headdim, dstate, groups = geo
    return heads // tp, headdim, dstate, groups // tp if groups % tp == 0 else 1


def needs_custom_op():
    return pytest.mark.skipif(not replayssm.HAS_CUSTOM_OP, reason="torch without torch.library.custom_op (< 2.4)")


def cuda_only():
    return pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build of libreplayssm_c.so")

