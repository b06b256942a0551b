"""The deferred import of optional integrations."""

import sys

import pytest

from tinax._core.optional import import_optional


def test_returns_the_module():
    module = import_optional("json.decoder", needed_by="tinax.example", install_hint="pip install example")
    assert module is sys.modules["json.decoder"]


def test_missing_module_names_caller_and_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "not_really_installed", None)
    with pytest.raises(ImportError, match=r'tinax\.example needs not_really_installed.*pip install "x\[y\]"') as caught:
        import_optional("not_really_installed.sub", needed_by="tinax.example", install_hint='pip install "x[y]"')
    assert isinstance(caught.value.__cause__, ImportError)
