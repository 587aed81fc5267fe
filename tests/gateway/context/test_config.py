"""The [context] table and [[models]] context_window in the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.errors import ConfigurationError
from tpx.gateway.context.config import ContextConfig, context_config
from tpx.gateway.settings import load_settings

ENV = {"TPX_OAUTH_TOKEN": "tok", "TPX_BASE_URL": "http://127.0.0.1:9/v1", "TPX_MODEL": "m"}


def test_the_file_sets_the_context_table_and_model_windows(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[context]\nwindow = 32768\nrewrite_errors = false\nrefresh = 60\n"
        '[[models]]\nmatch = "*haiku*"\nmodel = "small"\ncontext_window = 8192\n'
    )
    settings = load_settings(env=ENV, config_file=path)
    assert settings.context == ContextConfig(window=32768, rewrite_errors=False, refresh=60.0)
    assert settings.routes[0].context_window == 8192


def test_defaults_without_a_table() -> None:
    assert context_config({}) == ContextConfig()
    assert load_settings(env=ENV).context == ContextConfig()


@pytest.mark.parametrize(
    "table",
    [
        {"window": "big"},
        {"window": 0},
        {"window": True},
        {"preflight": 1},
        {"unknown": 1},
        {"refresh": -1.0},
    ],
    ids=str,
)
def test_bad_values_are_refused(table: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        context_config({"context": table})


def test_a_bad_models_window_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[models]]\nmatch = "*"\ncontext_window = 0\n')
    with pytest.raises(ConfigurationError):
        load_settings(env=ENV, config_file=path)
