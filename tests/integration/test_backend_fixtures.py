"""The test backend's 2026-07-28 fixtures, checked the 2025 way through the gateway.

The conformance suite's 2026-07-28 server scenarios (tests/conformance/run --era 2026 --bridge)
reach the 2025-only C test backend through mod_mcp's era bridge, which turns the backend's
server->client requests into InputRequiredResult rounds. These tests drive the same fixtures
as a 2025 client would, over the ordinary session path (/mcp): they answer the backend's
elicitation/sampling/roots requests on the call's stream and check what each scenario needs:
the request ids the bridge uses as inputRequests keys, the rounds (requests of one round
together, the next only after the answers), the results, and the errors for bad answers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from mcp_client import McpSession, SseEvent
import threading

from waiting import wait_for

ALL_CAPS = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}


def accept(content: dict) -> dict:
    return {"action": "accept", "content": content}


def sampled(text: str) -> dict:
    return {"role": "assistant", "content": {"type": "text", "text": text},
            "model": "test-model", "stopReason": "endTurn"}


ROOTS = {"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}


class Dialog:
    """One call whose answer comes as an SSE stream with server->client requests in it."""

    def __init__(self, session: McpSession, method: str, params: dict):
        self.session = session
        self.request_id = session.next_id()
        self.events: Iterator[SseEvent] = session.request_stream(method, params,
                                                                 request_id=self.request_id)
        self.notifications: list[dict] = []
        self.rounds: list[list[dict]] = []   # the server's requests, round by round

    def _next(self) -> dict:
        for ev in self.events:
            m = ev.json
            if m is not None:
                return m
        raise AssertionError("the stream ended early")

    def ask(self, n: int) -> dict[str, dict]:
        """Reads until n server requests have arrived; they must be all this round's: the
        response must not come first. Returns them by id."""
        got: list[dict] = []
        while len(got) < n:
            m = self._next()
            assert "id" not in m or "method" in m, f"a response before the round was complete: {m}"
            if "id" in m:
                got.append(m)
            else:
                self.notifications.append(m)
        self.rounds.append(got)
        return {r["id"]: r for r in got}

    def answer(self, answers: dict[str, Any], errors: dict[str, dict] | None = None) -> None:
        for key, result in answers.items():
            assert self.session.respond(key, result).status_code == 202
        for key, error in (errors or {}).items():
            assert self.session.respond(key, error=error).status_code == 202

    def response(self) -> dict:
        """Reads to the response of the call; server requests on the way fail the test."""
        while True:
            m = self._next()
            if m.get("id") == self.request_id and ("result" in m or "error" in m):
                return m
            assert "id" not in m, f"an unexpected server request: {m}"
            self.notifications.append(m)


@pytest.fixture
def client(mcp) -> Callable[..., McpSession]:
    def make(capabilities: dict | None = None) -> McpSession:
        s = mcp()
        s.initialize(capabilities=ALL_CAPS if capabilities is None else capabilities)
        return s
    return make


def call(session, name: str, meta: dict | None = None) -> Dialog:
    params: dict = {"name": name, "arguments": {}}
    if meta:
        params["_meta"] = meta
    return Dialog(session, "tools/call", params)


def text_of(response: dict) -> str:
    assert "result" in response, response
    assert not response["result"].get("isError"), response
    return response["result"]["content"][0]["text"]


def test_the_fixtures_are_listed_and_list_changes_announced(client):
    s = client()
    caps = s.initialize_result["capabilities"]
    assert caps["tools"]["listChanged"] is True and caps["prompts"]["listChanged"] is True
    tools = {t["name"]: t for t in s.call("tools/list")["tools"]}
    for name in ("test_input_required_result_elicitation", "test_input_required_result_sampling",
                 "test_input_required_result_list_roots", "test_input_required_result_request_state",
                 "test_input_required_result_tampered_state",
                 "test_input_required_result_multiple_inputs",
                 "test_input_required_result_multi_round", "test_input_required_result_capabilities",
                 "test_missing_capability", "test_streaming_elicitation", "test_logging_tool",
                 "test_trigger_tool_change", "test_trigger_prompt_change"):
        assert tools[name]["description"] and tools[name]["inputSchema"]["type"] == "object"
    prompts = [p["name"] for p in s.call("prompts/list")["prompts"]]
    assert "test_input_required_result_prompt" in prompts
    # SEP-2106 and SEP-2243 fixtures: the schemas reach the client intact.
    schema = tools["json_schema_2020_12_tool"]["inputSchema"]
    assert schema["$defs"]["address"]["$anchor"] == "addressDef"
    assert schema["allOf"] and schema["if"] and schema["additionalProperties"] is False
    region = tools["test_custom_header"]["inputSchema"]["properties"]["region"]
    assert region["x-mcp-header"] == "Region"
    assert text_of(s.request("tools/call", {"name": "test_custom_header",
                                            "arguments": {"region": "eu"}})) == "region: eu"


def test_elicitation_asks_for_user_name_and_greets(client):
    d = call(client(), "test_input_required_result_elicitation")
    req = d.ask(1)["user_name"]
    assert req["method"] == "elicitation/create"
    assert req["params"]["message"] == "What is your name?"
    assert req["params"]["requestedSchema"]["required"] == ["name"]
    d.answer({"user_name": accept({"name": "Alice"})})
    assert text_of(d.response()) == "Hello, Alice!"


def test_sampling_asks_capital_question(client):
    d = call(client(), "test_input_required_result_sampling")
    req = d.ask(1)["capital_question"]
    assert req["method"] == "sampling/createMessage"
    assert req["params"]["messages"][0]["content"]["text"] == "What is the capital of France?"
    d.answer({"capital_question": sampled("The capital of France is Paris.")})
    assert text_of(d.response()) == "The model said: The capital of France is Paris."


def test_list_roots_asks_client_roots(client):
    d = call(client(), "test_input_required_result_list_roots")
    assert d.ask(1)["client_roots"]["method"] == "roots/list"
    d.answer({"client_roots": ROOTS})
    assert text_of(d.response()) == "1 root(s): file:///test/root (Test Root)"


@pytest.mark.parametrize("tool", ["test_input_required_result_request_state",
                                  "test_input_required_result_tampered_state"])
def test_confirmation_round(client, tool):
    d = call(client(), tool)
    req = d.ask(1)["confirm"]
    assert req["params"]["requestedSchema"]["properties"] == {"ok": {"type": "boolean"}}
    d.answer({"confirm": accept({"ok": True})})
    assert "state-ok" in text_of(d.response())


def test_multiple_inputs_come_in_one_round(client):
    d = call(client(), "test_input_required_result_multiple_inputs")
    asked = d.ask(3)
    assert {k: r["method"] for k, r in asked.items()} == {
        "user_name": "elicitation/create", "greeting": "sampling/createMessage",
        "client_roots": "roots/list"}
    d.answer({"user_name": accept({"name": "Alice"}), "greeting": sampled("Hello there!"),
              "client_roots": ROOTS})
    assert text_of(d.response()) == ("name: Alice; greeting: Hello there!; "
                                     "1 root(s): file:///test/root (Test Root)")


def test_multi_round_asks_step2_only_after_step1(client):
    d = call(client(), "test_input_required_result_multi_round")
    assert d.ask(1)["step1"]["params"]["message"] == "Step 1: What is your name?"
    d.answer({"step1": accept({"name": "Alice"})})
    step2 = d.ask(1)["step2"]
    assert step2["params"]["requestedSchema"]["required"] == ["color"]
    d.answer({"step2": accept({"color": "blue"})})
    assert text_of(d.response()) == "Alice's favorite color is blue"
    assert [[r["id"] for r in rnd] for rnd in d.rounds] == [["step1"], ["step2"]]


def test_capabilities_decide_what_is_asked(client):
    d = call(client({"sampling": {}}), "test_input_required_result_capabilities")
    assert list(d.ask(1)) == ["capital_question"]
    d.answer({"capital_question": sampled("Paris")})
    assert text_of(d.response()) == "answered: capital_question"

    d = call(client(), "test_input_required_result_capabilities")
    asked = d.ask(3)
    assert sorted(asked) == ["capital_question", "client_roots", "user_name"]
    d.answer({"capital_question": sampled("Paris"), "user_name": accept({"name": "Bo"}),
              "client_roots": ROOTS})
    assert text_of(d.response()).startswith("answered: ")

    d = call(client({}), "test_input_required_result_capabilities")
    assert "done without asking" in text_of(d.response())
    assert d.rounds == []


def test_prompt_asks_before_it_answers(client):
    d = Dialog(client(), "prompts/get", {"name": "test_input_required_result_prompt"})
    req = d.ask(1)["user_context"]
    assert req["params"]["requestedSchema"]["required"] == ["context"]
    d.answer({"user_context": accept({"context": "test context"})})
    result = d.response()["result"]
    assert result["messages"][0]["content"]["text"] == "Write a short poem about: test context"


def test_missing_capability_asks_anyway_and_relays_the_clients_error(client):
    # A bridge answers the sampling request of a client without the capability with -32021;
    # the tool passes the code (and data) on as its own JSON-RPC error.
    d = call(client({}), "test_missing_capability")
    assert d.ask(1)["capital_question"]["method"] == "sampling/createMessage"
    d.answer({}, errors={"capital_question": {
        "code": -32021, "message": "Missing required client capability",
        "data": {"requiredCapabilities": {"sampling": {}}}}})
    err = d.response()["error"]
    assert err["code"] == -32021
    assert err["data"] == {"requiredCapabilities": {"sampling": {}}}


def test_streaming_elicitation_streams_progress_around_the_question(client):
    s = client()
    d = call(s, "test_streaming_elicitation", meta={"progressToken": "se-1"})
    assert "user_note" in d.ask(1)
    before = [(n["method"], n["params"].get("progress")) for n in d.notifications]
    assert before == [("notifications/progress", 1), ("notifications/message", None)]
    d.answer({"user_note": accept({"note": "none"})})
    assert text_of(d.response()) == 'thanks: action=accept, content={"note":"none"}'
    assert d.notifications[-1]["params"] == {"progressToken": "se-1", "progress": 2, "total": 2,
                                            "message": "answered"}


def test_logging_tool_logs_what_set_level_lets_through(client):
    s = client()
    d = call(s, "test_logging_tool")
    text_of(d.response())
    assert [n["params"]["level"] for n in d.notifications] == [
        "debug", "info", "notice", "warning", "error"]
    assert s.call("logging/setLevel", {"level": "warning"}) == {}
    d = call(s, "test_logging_tool")
    text_of(d.response())
    assert [n["params"]["level"] for n in d.notifications] == ["warning", "error"]
    assert s.call("logging/setLevel", {"level": "emergency"}) == {}
    d = call(s, "test_logging_tool")
    text_of(d.response())
    assert d.notifications == []


@pytest.mark.parametrize("tool,method", [
    ("test_trigger_tool_change", "notifications/tools/list_changed"),
    ("test_trigger_prompt_change", "notifications/prompts/list_changed")])
def test_triggers_announce_list_changes_on_the_get_stream(client, tool, method):
    s = client()
    seen: list[str] = []

    def follow():
        for ev in s.get_stream(timeout=30):
            if ev.json and "method" in ev.json:
                seen.append(ev.json["method"])
                return
    t = threading.Thread(target=follow, daemon=True)
    t.start()
    # The gateway opens the backend's GET stream when the client's arrives; until then the
    # backend queues the notification for the session, so either way it arrives.
    assert "list_changed" in text_of(call(s, tool).response())
    wait_for(lambda: seen, timeout=20, what=f"{method} on the GET stream")
    assert seen == [method]


def test_invalid_and_error_answers_end_the_call_with_an_error(client):
    s = client()
    d = call(s, "test_input_required_result_elicitation")
    d.ask(1)
    d.answer({"user_name": 12345})
    err = d.response()["error"]
    assert err["code"] == -32602 and "user_name" in err["message"]

    d = call(s, "test_input_required_result_elicitation")
    d.ask(1)
    d.answer({"user_name": {"action": "accept", "content": {"nickname": "x"}}})
    assert d.response()["error"]["code"] == -32602

    d = call(s, "test_input_required_result_sampling")
    d.ask(1)
    d.answer({}, errors={"capital_question": {"code": -1, "message": "User rejected sampling"}})
    err = d.response()["error"]
    assert err["code"] == -1 and "User rejected sampling" in err["message"]

    d = call(s, "test_input_required_result_elicitation")
    d.ask(1)
    d.answer({"user_name": {"action": "decline"}})
    assert text_of(d.response()) == "Hello, stranger! (the user chose to decline)"


def test_a_newer_call_with_the_same_key_supersedes_an_abandoned_one(client):
    # An abandoned round (its client never retried) must not take the answer meant for the
    # newer call: the answer goes to the newest call waiting for the key, the older one ends.
    s = client()
    old = call(s, "test_input_required_result_elicitation")
    old.ask(1)
    new = call(s, "test_input_required_result_elicitation")
    new.ask(1)
    err = old.response()["error"]
    assert err["code"] == -32000 and "superseded" in err["message"]
    new.answer({"user_name": accept({"name": "Carol"})})
    assert text_of(new.response()) == "Hello, Carol!"


def test_unknown_resource_error_names_the_uri(client):
    uri = "test://nonexistent-resource-for-conformance-testing"
    err = client().request("resources/read", {"uri": uri})["error"]
    assert err["code"] == -32002 and err["data"] == {"uri": uri}
