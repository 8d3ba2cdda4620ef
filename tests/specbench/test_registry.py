"""The one registration convention (``specbench.registry``, issue 51): a name is declared where it is defined
(``@<marker>("<name>")``), found by reading the package's sources, and asking for it imports only the module that
declares it. Shown on a package made here (one of whose modules cannot be imported at all), then on the project's
registries: policies, datasets and tables, each in a fresh process so that nothing was imported before."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import uuid

import pytest

from specbench.registry import ConfigError, declared_names

from helpers import ROOT


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``things_<id>`` with a registry ``THINGS`` (marker ``thing``) and modules written by the test."""
    name = f"things_{uuid.uuid4().hex[:8]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent(f'''
        from specbench.registry import Registry
        THINGS = Registry("thing", package="{name}", marker="thing")
        thing = THINGS.register
    '''), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(module: str, body: str) -> None:
        path = root.joinpath(*module.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(root).parents:
            if str(folder) != ".":
                (root / folder / "__init__.py").touch()
        path.with_suffix(".py").write_text(f"from {name} import thing\n" + textwrap.dedent(body), encoding="utf-8")

    yield name, write
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_asking_for_one_name_imports_only_the_module_that_declares_it(package):
    name, write = package
    write("light", '@thing("alpha")\nclass Alpha:\n    pass\n')
    write("heavy", 'raise RuntimeError("heavy was imported")\n\n@thing("beta")\nclass Beta:\n    pass\n')
    write("sub.deep", '@thing("gamma")\ndef gamma():\n    return 3\n')
    write("shared", "X = 1  # declares nothing\n")
    things = importlib.import_module(name).THINGS
    assert things.names() == ["alpha", "beta", "gamma"] and "beta" in things  # read from the sources alone
    assert not [m for m in sys.modules if m.startswith(f"{name}.")]
    assert things.get("alpha").__name__ == "Alpha"
    assert things.get("gamma")() == 3  # a subpackage's module is scanned too
    assert {m for m in sys.modules if m.startswith(f"{name}.")} == {f"{name}.light", f"{name}.sub", f"{name}.sub.deep"}
    with pytest.raises(RuntimeError, match="heavy was imported"):
        things.get("beta")  # its module is imported only now
    with pytest.raises(ConfigError, match="Did you mean 'alpha'"):
        things.get("alpah")


def test_a_declaration_the_scan_cannot_read_or_a_name_declared_twice_fails(package):
    name, write = package
    write("a", '@thing("same")\nclass A:\n    pass\n')
    write("b", '@thing("same")\nclass B:\n    pass\n')
    with pytest.raises(ValueError, match=rf"'same' is declared twice \(@thing\): in {name}.a and in {name}.b"):
        importlib.import_module(name).THINGS.names()
    with pytest.raises(ValueError, match="must name its entry with a string literal"):
        declared_names('NAME = "x"\n@thing(NAME)\nclass C:\n    pass\n', "thing", "c.py")
    assert declared_names('@thing("x", about="y")\nclass C:\n    pass\n@other("z")\ndef f():\n    pass\n', "thing") == ["x"]


def test_a_module_that_declares_a_name_but_registers_nothing_or_elsewhere_fails(package):
    name, write = package
    write("silent", 'def thing(name):  # shadows the registry\'s decorator: registers nothing\n'
                    '    return lambda obj: obj\n\n@thing("declared")\nclass A:\n    pass\n')
    things = importlib.import_module(name).THINGS
    with pytest.raises(ValueError, match=rf"{name}.silent declares thing 'declared' \(@thing\) but importing it "
                                         "registered nothing"):
        things.get("declared")
    with pytest.raises(ValueError, match=rf"'declared' registered twice: declared in {name}.silent, registered from x"):
        things.add("declared", object(), module="x")
    things.add("by_hand", object(), module="x")  # a name no source declares: allowed, and said
    assert things.undeclared() == ["by_hand"] and things.names() == ["by_hand", "declared"]


#: per registry: how to ask for one name, the registry, the name (``methods.base``, the interface every policy
#: subclasses, declares ``fixed`` and is imported by the package itself)
FRESH = {
    "policies": ("from methods.policies import POLICIES; POLICIES.get('svip')", "methods.policies:POLICIES", "svip"),
    "datasets": ("from specbench.tasks import TASKS; TASKS.get('gsm8k')", "specbench.tasks.config:TASKS", "gsm8k"),
    "tables": ("from analysis.artefacts import get; get('tables/time_breakdown')", "analysis.artefacts:ARTEFACTS",
               "tables/time_breakdown"),
}


@pytest.mark.parametrize("kind", sorted(FRESH))
def test_the_projects_registries_import_only_the_asked_names_module(kind):
    ask, registry, name = FRESH[kind]
    module, _, attribute = registry.partition(":")
    code = (f"import sys; {ask}; from {module} import {attribute} as R; "
            f"others = {{m for m in R.declared().values() if m not in (R.declared()[{name!r}], 'methods.base')}}; "
            f"print(R.declared()[{name!r}] in sys.modules, len(others), sorted(others & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    asked_imported, n_others, others_imported = out.stdout.split(" ", 2)
    assert asked_imported == "True" and int(n_others) >= 5
    assert others_imported.strip() == "[]"


@pytest.mark.parametrize("registry", ["methods.policies:POLICIES", "specbench.tasks.config:TASKS"])
def test_what_the_scan_reads_is_what_importing_registers(registry):
    """Every module of the package imported: each declared name is registered from the module declaring it, and
    nothing is registered that the sources do not declare (the scan sees every registration)."""
    from specbench.registry import import_target, package_modules

    reg = import_target(registry)
    for module, _ in package_modules(reg.package):
        importlib.import_module(module)
    assert reg.undeclared() == []
    assert sorted(reg.load_all()) == reg.names() == sorted(reg.declared())


def test_importing_a_declaring_module_scans_nothing_and_the_scan_then_checks_what_it_registered(package):
    name, write = package
    write("light", '@thing("alpha")\nclass Alpha:\n    pass\n')
    things = importlib.import_module(name).THINGS
    importlib.import_module(f"{name}.light")  # the decorator registers; no source is read yet
    things.add("beta", object(), module=f"{name}.elsewhere")
    write("heavy", '@thing("beta")\nclass Beta:\n    pass\n')  # declared elsewhere than it was registered from
    with pytest.raises(ValueError, match=rf"'beta' registered twice: declared in {name}.heavy, registered from "
                                         rf"{name}.elsewhere"):
        things.names()
