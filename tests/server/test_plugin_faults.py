"""`switchyard serve` with failing plugins (tests/plugin_host/fixtures/faults.yaml): a
request a plugin failure concerns gets a 500 naming the plugin, a session
whose scheduler is out of service answers 503 at once, nothing hangs, and
the server still exits 0 on SIGTERM. Driven by the official openai client
(no retries) with a timeout far above a request's normal time."""
import os

import openai
import pytest

from conftest import API_KEY, start_server, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = os.path.join(HERE, "..", "plugin_host", "fixtures", "faults.yaml")

pytestmark = pytest.mark.skipif(not os.environ.get("SY_FAULT_PLUGIN"), reason="needs SY_FAULT_PLUGIN (the test build's fault plugin)")


def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def complete(c, n=24):
    return c.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=n, temperature=0,
                                extra_body={"ignore_eos": True})


def assert_names_the_plugin(err):
    text = str(err)
    assert "fault-injection" in text and "injected failure" in text, text


@pytest.mark.parametrize("profile", ["plan-status", "plan-throw"])
def test_a_failing_scheduler_answers_500_then_503_and_never_hangs(profile):
    proc, port = start_server(manifest=FAULTS, profile=profile)
    try:
        c = client(port)
        with pytest.raises(openai.InternalServerError) as first:
            complete(c)
        assert first.value.status_code == 500
        assert_names_the_plugin(first.value)
        assert "out of service" in str(first.value)
        # Out of service: refused at once, 503, still naming the plugin.
        with pytest.raises(openai.APIStatusError) as later:
            complete(c)
        assert later.value.status_code == 503, later.value
        assert_names_the_plugin(later.value)
    finally:
        stop_server(proc)


@pytest.mark.parametrize("profile", ["allocate-status", "allocate-throw", "commit-throw", "propose-status", "propose-throw"])
def test_a_failing_cache_or_drafter_fails_each_request_with_500_and_keeps_serving(profile):
    proc, port = start_server(manifest=FAULTS, profile=profile)
    try:
        c = client(port)
        for _ in range(3):  # every request fails on its own; the server stays up
            with pytest.raises(openai.InternalServerError) as e:
                complete(c)
            assert e.value.status_code == 500
            assert_names_the_plugin(e.value)
        # A streamed request ends with the error too, not a stall.
        with pytest.raises(openai.APIError) as streamed:
            for _ in c.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8, stream=True):
                pass
        assert_names_the_plugin(streamed.value)
    finally:
        stop_server(proc)


def test_a_fallback_scheduler_serves_exactly_what_the_healthy_one_does():
    outs = {}
    for profile in ["healthy", "plan-fallback"]:
        proc, port = start_server(manifest=FAULTS, profile=profile)
        try:
            outs[profile] = complete(client(port)).choices[0].text
        finally:
            stop_server(proc)
    assert outs["plan-fallback"] == outs["healthy"]
