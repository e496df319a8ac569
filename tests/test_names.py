"""Kernel names: the registry keys kernels by module and qualified name (their full name), and
finds them by short name while that is unique (issue 30, item 5)."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.__main__ import parse_args
from gpufuncs.kernels import builtin_names

X = np.array([0.0, 1.0, 2.5])

_ACT = """
import gpufuncs as gf

@gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: {body})
def act(x):
    return {body}
"""


@pytest.fixture
def make_module(tmp_path, monkeypatch, restore_registry):
    """``make(name, source)``: a real module, importable by name (also by a child process with
    ``tmp_path`` on its ``PYTHONPATH``), imported; forgotten again after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(source)
        made.append(name)
        return importlib.import_module(name)

    yield make
    for name in made:
        sys.modules.pop(name, None)


@pytest.fixture
def two_acts(make_module):
    """Two modules that each define a kernel ``act``: ``x + 1`` and ``2 * x``."""
    return (make_module("names_mod_a", _ACT.format(body="x + 1")),
            make_module("names_mod_b", _ACT.format(body="2 * x")))


def run_cell(module: str, source: str) -> dict:
    """Run ``source`` as a notebook cell would, in a module that no import finds."""
    namespace = {"__name__": module}
    exec(compile(source, f"<cell of {module}>", "exec"), namespace)
    return namespace


def test_two_modules_defining_act_both_import_and_work(two_acts):
    a, b = two_acts
    np.testing.assert_array_equal(a.act(X), X + 1)
    np.testing.assert_array_equal(b.act(X), 2 * X)
    assert (a.act.full_name, b.act.full_name) == ("names_mod_a.act", "names_mod_b.act")
    assert a.act.__name__ == b.act.__name__ == "act"
    assert gf.registry["names_mod_a.act"] is a.act and gf.registry["names_mod_b.act"] is b.act
    assert gf.get("names_mod_b.act", "cpu")(np.array([1.5]))[0] == 3.0


def test_a_short_name_finds_its_kernel_while_it_is_unique(make_module):
    a = make_module("names_mod_a", _ACT.format(body="x + 1"))
    assert gf.registry["act"] is a.act and "act" in gf.names()
    assert gf.registry["exp"] is gf.exp and gf.registry["gpufuncs.kernels.exp.exp"] is gf.exp


def test_an_ambiguous_short_name_raises_listing_the_candidates(two_acts):
    message = (r"kernel name 'act' is ambiguous: 2 registered kernels have it "
               r"\(names_mod_a\.act, names_mod_b\.act\); ask for one by its full name")
    with pytest.raises(KeyError, match=message):
        gf.registry["act"]
    with pytest.raises(KeyError, match=message):
        gf.get("act")
    assert "act" not in gf.registry and "names_mod_a.act" in gf.registry


def test_an_unknown_name_lists_the_registered_ones_by_their_keys(two_acts):
    with pytest.raises(KeyError, match=r"unknown kernel 'akt'; registered kernels: "
                                       r"names_mod_a\.act, names_mod_b\.act, .*clamp, .*exp, .*gaussian"):
        gf.registry["akt"]


def test_names_are_short_where_unique_and_full_otherwise(two_acts):
    names = gf.names()
    assert names.index("names_mod_b.act") == names.index("names_mod_a.act") + 1  # sorted by short name
    assert "act" not in names and {"clamp", "exp", "gaussian", "hermite_norm"} <= set(names)
    assert names == list(gf.registry) and len(names) == len(gf.registry) == len(set(names))
    assert [gf.registry[n] for n in names] == list(gf.registry.values())
    assert two_acts[0].act in gf.registry.values() and two_acts[1].act in gf.registry.values()


def test_builtin_names_stay_valid_keys_when_a_users_kernel_shares_one(make_module, monkeypatch):
    mine = make_module("names_mod_exp", "import gpufuncs as gf\n\n"
                       "@gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x)\n"
                       "def exp(x):\n    return x\n")
    assert builtin_names() == ["clamp", "gpufuncs.kernels.exp.exp", "gaussian", "hermite_norm"]
    assert gf.registry["gpufuncs.kernels.exp.exp"] is gf.exp and gf.registry["names_mod_exp.exp"] is mine.exp
    np.testing.assert_array_equal(gf.exp(X), np.exp(X))  # the attribute is untouched


def test_the_cli_takes_full_names_and_refuses_an_ambiguous_one(two_acts, capsys):
    assert parse_args(["--kernels", "names_mod_b.act,exp"]).kernels == ["names_mod_b.act", "exp"]
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--kernels", "act"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--kernels: kernel name 'act' is ambiguous: 2 registered kernels have it" in error


def test_same_named_module_kernels_pickle_by_reference_to_the_right_one(two_acts, tmp_path):
    a, b = two_acts
    payloads = [pickle.dumps(a.act), pickle.dumps(b.act)]
    assert [pickle.loads(p) for p in payloads] == [a.act, b.act]
    assert all(len(p) < 100 for p in payloads)  # a module and a name each, not the declaration
    # A process that has imported neither module (a Dask worker) finds each by its module.
    code = ("import pickle, sys, numpy as np\n"
            "for payload in sys.stdin.buffer.read().split(b'--next--'):\n"
            "    k = pickle.loads(payload)\n"
            "    print(k.full_name, k(np.array([0.0, 1.0, 2.5])).tolist())\n")
    done = subprocess.run([sys.executable, "-c", code], input=b"--next--".join(payloads),
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["names_mod_a.act [1.0, 2.0, 3.5]",
                                                 "names_mod_b.act [0.0, 2.0, 5.0]"]


def test_same_named_cell_kernels_pickle_by_value_to_the_right_one(restore_registry):
    cloudpickle = pytest.importorskip("cloudpickle")
    first = run_cell("names_cell_a", _ACT.format(body="x + 1"))["act"]
    second = run_cell("names_cell_b", _ACT.format(body="2 * x"))["act"]
    payloads = [cloudpickle.dumps(first), cloudpickle.dumps(second)]
    assert [pickle.loads(p) for p in payloads] == [first, second]  # one object per process
    code = ("import pickle, sys, numpy as np, gpufuncs as gf\n"
            "for payload in sys.stdin.buffer.read().split(b'--next--'):\n"
            "    k = pickle.loads(payload)\n"
            "    assert gf.registry[k.full_name] is k\n"
            "    print(k.full_name, k(np.array([0.0, 1.0, 2.5])).tolist())\n"
            "print(' '.join(n for n in gf.names() if 'act' in n))\n")
    done = subprocess.run([sys.executable, "-c", code], input=b"--next--".join(payloads),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["names_cell_a.act [1.0, 2.0, 3.5]",
                                                 "names_cell_b.act [0.0, 2.0, 5.0]",
                                                 "names_cell_a.act names_cell_b.act"]


def test_without_cloudpickle_cell_kernels_pickle_by_full_name(restore_registry, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # ``import cloudpickle`` fails
    first = run_cell("names_cell_a", _ACT.format(body="x + 1"))["act"]
    second = run_cell("names_cell_b", _ACT.format(body="2 * x"))["act"]
    for kernel in (first, second):
        payload = pickle.dumps(kernel)
        assert kernel.full_name.encode() in payload and pickle.loads(payload) is kernel
    # Re-run, the cell replaces its kernel: the old one would unpickle as the new one.
    newer = run_cell("names_cell_a", _ACT.format(body="x + 3"))["act"]
    assert pickle.loads(pickle.dumps(newer)) is newer
    with pytest.raises(pickle.PicklingError, match=r"kernel 'names_cell_a\.act' is no longer the "
                                                   r"registered kernel of that name.*install cloudpickle"):
        pickle.dumps(first)


_CELL = """
import gpufuncs as gf

@gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: {k} * x, name="cell_scaled")
def scaled(x):
    return {k} * x
"""


def test_rerunning_a_notebook_cell_replaces_its_kernel_and_its_code(restore_registry):
    namespace: dict = {"__name__": "__main__"}
    exec(compile(_CELL.format(k=2), "<cell>", "exec"), namespace)
    first = gf.registry["cell_scaled"]
    assert first.full_name == "__main__.cell_scaled" and first(np.float64(1.5)) == 3.0
    count = len(gf.registry)
    exec(compile(_CELL.format(k=3), "<cell>", "exec"), namespace)  # the same cell, edited
    assert len(gf.registry) == count and "cell_scaled" in gf.names()
    assert gf.registry["cell_scaled"] is not first and gf.registry["cell_scaled"](np.float64(1.5)) == 4.5
    assert first(np.float64(1.5)) == 3.0  # a callable still held keeps its own code


def _negate(x):
    return -x


def test_replace_takes_a_short_name_over_from_other_definitions(restore_registry):
    namespace: dict = {"__name__": "__main__"}
    exec(compile(_CELL.format(k=2), "<cell>", "exec"), namespace)
    cell = namespace["scaled"]

    def other(x):
        return x

    beside = gf.ufunc(signatures=gf.float_signatures(1), reference=None, name="cell_scaled")(other)
    assert beside.full_name.endswith("test_replace_takes_a_short_name_over_from_other_definitions"
                                     ".<locals>.cell_scaled")
    with pytest.raises(KeyError, match=r"'cell_scaled' is ambiguous.*__main__\.cell_scaled"):
        gf.registry["cell_scaled"]
    taken = gf.ufunc(signatures=gf.float_signatures(1), reference=None, name="cell_scaled",
                     replace=True)(_negate)
    assert taken.full_name == f"{__name__}.cell_scaled"
    assert gf.registry["cell_scaled"] is taken and gf.names().count("cell_scaled") == 1
    assert cell.full_name not in gf.registry and beside.full_name not in gf.registry
    assert cell(np.float64(1.5)) == 3.0 and taken(np.float64(1.5)) == -1.5  # all still work


def _factory(scale: float) -> gf.Kernel:
    @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: scale * x)
    def act(x):
        return scale * x

    return act


def _other_factory() -> gf.Kernel:
    @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: -x)
    def act(x):
        return -x

    return act


def test_a_kernel_made_in_a_function_is_replaced_by_the_next_call(restore_registry):
    """``<locals>`` kernels follow the same rule: one full name, one registered kernel (the
    newest, as for a cell re-run); each callable keeps working, and another function's
    ``act`` is another full name."""
    double, triple = _factory(2.0), _factory(3.0)
    assert double.full_name == triple.full_name == f"{__name__}._factory.<locals>.act"
    assert gf.registry[double.full_name] is triple
    negate = _other_factory()
    assert gf.registry[f"{__name__}._other_factory.<locals>.act"] is negate
    with pytest.raises(KeyError, match=r"'act' is ambiguous: 2 registered"):
        gf.registry["act"]
    np.testing.assert_array_equal(double(X), 2 * X)
    np.testing.assert_array_equal(triple(X), 3 * X)
    np.testing.assert_array_equal(negate(X), -X)


def test_name_renames_the_kernel_in_its_scope(restore_registry):
    def body(x):
        return x + x

    twice = gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: 2 * x, name="twice")(body)
    again = gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: 2 * x, name="again")(body)
    scope = f"{__name__}.test_name_renames_the_kernel_in_its_scope.<locals>"
    assert (twice.full_name, again.full_name) == (f"{scope}.twice", f"{scope}.again")
    assert gf.registry["twice"] is twice and gf.registry["again"] is again  # one function, two kernels
    assert twice.__qualname__ == f"{scope[len(__name__) + 1:]}.body"  # pickling finds the function
    np.testing.assert_array_equal(again(X), 2 * X)


def test_a_name_with_a_dot_is_refused(restore_registry):
    before = gf.names()
    with pytest.raises(gf.KernelDefinitionError, match=r"'my\.act': a kernel's name cannot contain '\.'"):
        gf.ufunc(signatures=gf.float_signatures(1), reference=None, name="my.act")(lambda x: x)
    assert gf.names() == before
