"""What goes on the wire: a tool conversation in the native form or as text."""
import json


def test_the_text_form_of_a_tool_conversation():
    from passepartout.wire import native_messages, text_messages
    call = {"id": "c1", "name": "shell", "arguments": '{"cmd": "ls", "explanation": "to see"}'}
    neutral = [{"role": "system", "content": "rules"},
               {"role": "user", "content": "list my files"},
               {"role": "user", "content": "Result of ls:\nnotes.txt", "passepartout_call": call},
               {"role": "user", "content": "and now?"},
               {"role": "assistant", "content": None}]
    text = text_messages(neutral)
    assert [m["role"] for m in text] == ["system", "user", "assistant", "user", "assistant"], text
    assert json.loads(text[2]["content"]) == {"action": "shell", "cmd": "ls", "explanation": "to see"}, text
    assert text[3]["content"] == "Result of ls:\nnotes.txt\n\nand now?", text
    assert text[4]["content"] == "" and all("passepartout_call" not in m for m in text), text
    native = native_messages(neutral)
    assert [m["role"] for m in native] == ["system", "user", "assistant", "tool", "user", "assistant"], native
    assert native[2]["content"] == "" and native[2]["tool_calls"][0]["id"] == "c1", native
    assert all(isinstance(m["content"], str) for m in native), native
    odd = text_messages([{"role": "user", "content": "go", "passepartout_call":
                          {"id": "c2", "name": "shell", "arguments": "not json"}}])
    assert json.loads(odd[0]["content"]) == {"action": "shell", "arguments": "not json"}, odd


def test_every_request_alternates_in_both_forms():
    from passepartout.wire import native_messages, text_messages
    neutral = [{"role": "system", "content": "rules"},
               {"role": "assistant", "content": "an answer the cut history begins with"},
               {"role": "user", "content": "list my files"},
               {"role": "user", "content": "Your previous proposals were refused: …"},
               {"role": "user", "content": "Result of (:action :shell :cmd \"ls\"):\nnotes.txt"},
               {"role": "assistant", "content": "first"},
               {"role": "assistant", "content": "second"}]
    for form in (native_messages, text_messages):
        out = form(neutral)
        assert [m["role"] for m in out] == ["system", "user", "assistant"], (form, out)
        assert "refused" in out[1]["content"] and "notes.txt" in out[1]["content"], out
        assert out[2]["content"] == "first\n\nsecond", out


def test_words_beside_a_call_are_the_assistant_turn_that_made_it():
    from passepartout.wire import native_messages, text_messages
    call = {"id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}', "said": "I'll list the files first."}
    neutral = [{"role": "system", "content": "rules"}, {"role": "user", "content": "go"},
               {"role": "user", "content": "Result of ls:\nnotes.txt", "passepartout_call": call}]
    native = native_messages(neutral)
    assert native[2]["content"] == "I'll list the files first." and native[2]["tool_calls"], native
    text = text_messages(neutral)
    assert text[2]["content"].startswith("I'll list the files first.\n\n{"), text


def test_the_text_protocol_is_left_out_when_the_tools_go_natively():
    from passepartout.wire import without_text_protocol
    system = "IDENTITY\n\nAnswer as a plist. RULES\n\nActions:\n(:action :shell)\n\nWorkspace: /w"
    out = without_text_protocol([{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
                                ["Answer as a plist.", "Actions:\n(:action :shell)"])
    assert out[0]["content"] == "IDENTITY\n\nRULES\n\nWorkspace: /w", out
    assert out[1] == {"role": "user", "content": "hi"}, out
