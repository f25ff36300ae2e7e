"""The occupancy calculator against hand-computed CUDA Occupancy Calculator answers, and the
joint-residency frontier's invariants."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.llm.occupancy import (
    KernelDesc,
    co_resident,
    frontier,
    get_arch,
    get_kernel,
    gpu_arch,
    jointly_resident,
    kernels,
    occupancy,
)


def test_fa2_style_kernel_is_register_limited_on_ampere():
    # 128 threads x 255 regs: 8192 regs/warp, 2 warps per 16K-register partition -> 8 warps/SM
    k = KernelDesc("k", threads=128, regs=255, smem=0)
    occ = occupancy(k, get_arch("sm80"))
    assert occ.by_wall["registers"] == 2 and occ.blocks == 2 and occ.limiter == "registers"
    assert occ.occupancy == pytest.approx(8 / 64)


def test_smem_limit_includes_the_reserved_kilobyte():
    arch = get_arch("sm80")  # 164 KB per SM
    k = KernelDesc("k", threads=32, regs=32, smem=82 * 1024 - 1024)  # 82 KB with reserve
    assert occupancy(k, arch).by_wall["smem"] == 2
    k2 = KernelDesc("k", threads=32, regs=32, smem=82 * 1024)
    assert occupancy(k2, arch).by_wall["smem"] == 1


def test_warp_and_block_limits_differ_between_a100_and_a6000():
    k = KernelDesc("k", threads=32, regs=16, smem=0)
    assert occupancy(k, get_arch("sm80")).blocks == 32
    assert occupancy(k, get_arch("sm86")).blocks == 16


def test_unlaunchable_kernels_report_zero_blocks():
    assert occupancy(KernelDesc("k", 128, 256, 0), get_arch("sm80")).blocks == 0
    assert occupancy(KernelDesc("k", 128, 32, 200_000), get_arch("sm86")).blocks == 0


def test_gemm_smem_follows_the_cublas_name():
    k = get_kernel("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn")
    assert k.smem == 3 * (256 + 128) * 64 * 2
    assert k not in kernels("sm86", "prefill")  # 144 KB does not fit an A6000 block


def test_dominant_gemm_pair_fails_on_a800_on_smem():
    arch, sms = gpu_arch("a800")
    pk = get_kernel("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn")
    dk = get_kernel("ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x5_tn")
    assert sms == 108 and not jointly_resident(pk, dk, arch)
    assert frontier(pk, dk, arch) == []


def test_bad_names_and_descriptors_are_clear_errors():
    with pytest.raises(UnknownNameError):
        gpu_arch("v100")
    with pytest.raises(UnknownNameError):
        get_arch("sm70")
    with pytest.raises(ConfigError):
        KernelDesc("k", threads=0, regs=32, smem=0)


kernel_st = st.builds(
    KernelDesc,
    name=st.just("k"),
    threads=st.integers(1, 1024),
    regs=st.integers(1, 255),
    smem=st.integers(0, 100_000),
)


@given(a=kernel_st, b=kernel_st, arch=st.sampled_from(["sm80", "sm86", "sm90"]))
def test_frontier_points_are_feasible_and_maximal(a, b, arch):
    limits = get_arch(arch)
    points = frontier(a, b, limits)
    assert bool(points) == jointly_resident(a, b, limits)
    for n_p, n_d, wall in points:
        assert co_resident(a, n_p, b, n_d, limits)
        assert not co_resident(a, n_p, b, n_d + 1, limits)
        assert wall in ("registers", "smem", "warps", "blocks")
    # more prefill blocks never leave room for more decode blocks
    decode = [n_d for _, n_d, _ in points]
    assert decode == sorted(decode, reverse=True)


@given(k=kernel_st, arch=st.sampled_from(["sm80", "sm86", "sm90"]))
def test_blocks_the_calculator_allows_can_be_split_into_a_pair(k, arch):
    limits = get_arch(arch)
    blocks = occupancy(k, limits).blocks
    if blocks >= 2:
        assert co_resident(k, blocks - 1, k, 1, limits)
