"""Fault attribution and the per-worker breaker (issue 20), as functions: which cause each way a sim
job can end has, which causes a unit's errored attempts count, when the breaker trips, and the health
check that tells a hung external server from a slow episode."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from harness.worker.external_server import ask_health, health_target
from harness.worker.faults import (
    CANCELLED,
    MODEL_SERVER,
    NODE,
    UNIT,
    Breaker,
    BreakerTripped,
    Fault,
    classify,
    of_attempt,
)
from harness.worker.sim_process import SimOutcome


@pytest.mark.parametrize(
    ("outcome", "down", "cause"),
    [
        (SimOutcome(0, None, None), None, None),
        (SimOutcome(-15, "cancelled", 1), None, CANCELLED),
        (SimOutcome(-9, "model server died", 1), "its process is gone", MODEL_SERVER),
        (SimOutcome(-9, "stalled", 1), None, UNIT),
        (SimOutcome(-9, "stalled", 1), "POLICY_SERVER x missed 2 health checks", MODEL_SERVER),
        (SimOutcome(-9, "unit timeout", 1), None, UNIT),
        (SimOutcome(2, None, None, "eval_policy_client: cannot start: no server"), None, MODEL_SERVER),
        (SimOutcome(3, None, 0), None, MODEL_SERVER),
        (SimOutcome(4, None, None, "eval_policy_client: cannot start: no Vulkan device"), None, NODE),
        (SimOutcome(1, None, 0), None, UNIT),  # a traceback in the sim: the unit's
        (SimOutcome(-11, None, 0), None, UNIT),  # a segfault mid-episode: the unit's
    ],
)
def test_each_way_a_sim_assignment_ends_has_a_cause(
    outcome: SimOutcome, down: str | None, cause: str | None
) -> None:
    fault = classify(outcome, down)
    assert (fault.cause if fault else None) == cause
    if fault is not None and outcome.said:
        assert outcome.said in fault.why  # the sim's own line says what broke
    if fault is not None and down:
        assert down in fault.why or fault.cause == UNIT


def test_an_attempt_is_the_model_servers_when_it_died_meanwhile_but_a_broken_node_stays_the_nodes() -> None:
    assert of_attempt(None, 2, server_died=False) == Fault(UNIT, "2 seeds errored")
    died = of_attempt(Fault(UNIT, "stalled"), 1, server_died=True)
    assert died.cause == MODEL_SERVER and "model server died during the unit (stalled)" in died.why
    node = Fault(NODE, "the benchmark or its renderer cannot start on this node (exit 4)")
    assert of_attempt(node, 1, server_died=True) == node


def test_the_breaker_trips_on_consecutive_non_unit_faults_only() -> None:
    breaker = Breaker(3)
    server = Fault(MODEL_SERVER, "the sim client lost the model server mid-unit (exit 3)")
    node = Fault(NODE, "no renderer")
    breaker.record(server)
    breaker.record(node)
    breaker.record(Fault(CANCELLED, "stopped"))  # says nothing either way
    breaker.record(Fault(UNIT, "stalled"))  # the node and server worked: the streak restarts
    breaker.record(node)
    breaker.record(None)  # a unit ran: restarts too
    breaker.record(node)
    breaker.record(server)
    tripped = r"3 attempts in a row .*WORKER_FAULT_LIMIT=3.*the last: node: no renderer"
    with pytest.raises(BreakerTripped, match=tripped):
        breaker.record(node)


def test_health_targets_of_both_protocols_and_a_bad_address_is_named() -> None:
    assert health_target("10.0.0.5:8000", "openpi") == ("http", "10.0.0.5", 8000, "/healthz")
    assert health_target("wss://h.example/ws", "vla-eval") == ("https", "h.example", 443, "/health")
    assert health_target("ws://[::1]:9000", "vla-eval") == ("http", "::1", 9000, "/health")
    with pytest.raises(ValueError, match="POLICY_SERVER='h:notaport'"):
        health_target("h:notaport", "openpi")


def test_the_health_check_tells_an_answering_server_from_a_silent_or_absent_one() -> None:
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # a server without a health endpoint still answers: alive
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            """Quiet."""

    answering = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=answering.serve_forever, daemon=True).start()
    silent = socket.create_server(("127.0.0.1", 0))  # connects complete from the backlog, nothing answers
    gone = socket.create_server(("127.0.0.1", 0))
    gone_port = gone.getsockname()[1]
    gone.close()
    try:
        assert ask_health("http", "127.0.0.1", answering.server_address[1], "/health", 5.0) is None
        started = time.monotonic()
        why = ask_health("http", "127.0.0.1", silent.getsockname()[1], "/health", 0.5)
        assert why is not None and "no answer to GET /health within 0.5 s" in why
        assert time.monotonic() - started < 5
        why = ask_health("http", "127.0.0.1", gone_port, "/healthz", 0.5)
        assert why is not None and "ConnectionRefusedError" in why
    finally:
        answering.shutdown()
        silent.close()
