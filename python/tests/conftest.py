"""Shared set-up for the Python package's tests.

SWITCHYARD_PREFIX: where `cmake --install` put the engine the package was
built against (its bin/switchyard is the CLI the outputs are compared with);
SWITCHYARD_SHARED: the shared models folder (default: ../shared beside the
repository).
"""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("SWITCHYARD_SHARED", REPO.parent / "shared"))
MODEL = str(SHARED / "models" / "stories260K.onnx")
TOKENIZER = str(SHARED / "models" / "tok512.bin")
REAL = REPO / "tests" / "models" / "real"


def prefix() -> pathlib.Path:
    p = os.environ.get("SWITCHYARD_PREFIX")
    if not p:
        pytest.skip("SWITCHYARD_PREFIX (the engine's install prefix) is not set")
    return pathlib.Path(p)


@pytest.fixture(scope="session")
def cli() -> str:
    return str(prefix() / "bin" / "switchyard")


@pytest.fixture(scope="session")
def engine():
    import switchyard

    with switchyard.Engine(model=MODEL, tokenizer=TOKENIZER, threads=1) as e:
        yield e
