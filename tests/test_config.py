from pathlib import Path

import pytest
import torch

from forge_backend.config import KforgeConfig
from forge_backend.errors import BadOption


def test_defaults():
    cfg = KforgeConfig.load({}, env={})
    assert cfg.inner == "inductor" and cfg.strict is False and cfg.search == "on_miss"  # Note [the default inner]
    assert cfg.cache_dir.name == "kforge"


def test_env_and_options_precedence():
    env = {"KFORGE_INNER": "eager", "KFORGE_STRICT": "1", "KFORGE_CACHE_DIR": "/tmp/x", "KFORGE_MARGIN": "0.1"}
    cfg = KforgeConfig.load({}, env=env)
    assert (cfg.inner, cfg.strict, cfg.cache_dir, cfg.margin) == ("eager", True, Path("/tmp/x"), 0.1)
    cfg = KforgeConfig.load({"inner": "inductor", "strict": False}, env=env)
    assert cfg.inner == "inductor" and cfg.strict is False  # explicit options beat env vars


def test_families_parse():
    assert KforgeConfig.load({"families": "matmul, conv"}, env={}).families == ("matmul", "conv")
    assert KforgeConfig.load({}, env={"KFORGE_FAMILIES": "conv"}).families == ("conv",)


@pytest.mark.parametrize("options,needle", [
    ({"inner": "tvm"}, "option inner='tvm' is not valid; choose one of: eager, inductor"),
    ({"search": "always"}, "search='always'"),
    ({"strict": "maybe"}, "strict='maybe' is not a valid bool"),
    ({"search_iterations": "many"}, "search_iterations='many'"),
    ({"search_iterations": 0}, "search_iterations=0 must be >= 1"),
    ({"margin": 2}, "margin=2.0 must be in [0, 1)"),
    ({"families": "attention"}, "families you can opt in: conv, matmul"),
    ({"innr": "eager"}, "unknown kforge option(s) ['innr'] (innr: did you mean 'inner'?); valid options:"),
    ({"zzz": 1}, "unknown kforge option(s) ['zzz']; valid options:"),
])
def test_bad_options_name_the_option(options, needle):
    with pytest.raises(BadOption) as e:
        KforgeConfig.load(options, env={})
    assert needle in str(e.value)


def test_bad_env_value_names_the_variable():
    with pytest.raises(BadOption, match="KFORGE_INNER='foo' is not valid; choose one of: eager, inductor"):
        KforgeConfig.load({}, env={"KFORGE_INNER": "foo"})
    with pytest.raises(BadOption, match="KFORGE_SEARCH_SECONDS='soon'"):
        KforgeConfig.load({}, env={"KFORGE_SEARCH_SECONDS": "soon"})


def test_bad_option_through_torch_compile_raises():
    f = torch.compile(torch.nn.Softmax(-1), backend="kforge", options={"inner": "fast"})
    with pytest.raises(Exception, match="inner='fast'"):
        f(torch.randn(2, 3))
