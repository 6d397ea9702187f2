"""Shared fixtures for the integration tests: build paths, free ports."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD


@pytest.fixture(scope="session")
def build_dir():
    return BUILD
