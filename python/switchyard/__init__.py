"""Switchyard: a plugin-based LLM inference engine, from Python.

    import switchyard
    engine = switchyard.Engine(model="stories260K.onnx", tokenizer="tok512.bin")
    print(engine.generate("Once upon a time", max_tokens=32).text)
    for chunk in engine.stream("Once upon a time", max_tokens=32):
        print(chunk.text, end="", flush=True)

Everything goes through the C embedding API (switchyard.h) of an installed
libswitchyard. Errors are raised as switchyard.Error subclasses carrying the
engine's message (InvalidArgument is also a ValueError, NotFound a
FileNotFoundError, OutOfMemory a MemoryError).
"""
from ._core import (
    API_VERSION,
    Cancelled,
    Error,
    InvalidArgument,
    NotFound,
    OutOfMemory,
    PluginFailure,
    ProtocolError,
    ShuttingDown,
    Unsupported,
    block_hashes,
    default_manifest,
)
from .engine import Chunk, Engine, KvEvent, Result, Tokenizer
from .openai import Answer, OpenAIProtocol

__all__ = [
    "API_VERSION",
    "Answer",
    "Cancelled",
    "Chunk",
    "Engine",
    "Error",
    "InvalidArgument",
    "KvEvent",
    "NotFound",
    "OpenAIProtocol",
    "OutOfMemory",
    "PluginFailure",
    "ProtocolError",
    "Result",
    "ShuttingDown",
    "Tokenizer",
    "Unsupported",
    "block_hashes",
    "default_manifest",
]
