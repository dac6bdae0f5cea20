"""A prompt that starts as an earlier one did is prefilled only after that start (issue 69, point
3: ``wenxin.models.prefix_cache`` in ``wenxin serve``), on real exports of an ERNIE 4.5 chat model
from both graph modes: its logits and cache equal a whole prefill's, alone and as a row of one
``advance`` call, and the service answers as it does without the prefix cache while counting the
prompt tokens it spared."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from test_generation_serving import chat_export, metric, service_of  # noqa: E402
from test_text_generation import post  # noqa: E402
SYSTEM = "你是一个乐于助人的助手，请用简洁、准确、友好的中文回答用户的每一个问题，并在需要时给出例子。"


@pytest.fixture(scope="module", params=["dynamic", "static"])
def chat_mode_folder(request, tmp_path_factory):
    return chat_export(tmp_path_factory.mktemp(f"chat-{request.param}"), request.param)


def test_a_prompt_that_starts_as_a_kept_one_did_prefills_the_rest_and_gets_the_whole_prefill(chat_mode_folder):
    from wenxin.inference.predictor import Predictor
    from wenxin.models.batch_prefill import prefill_together
    from wenxin.models.prefix_cache import PrefixCache
    predictor = Predictor(chat_mode_folder)
    first, second = (predictor.prompt([json.dumps({"system": SYSTEM, "src": [q]}, ensure_ascii=False)])["ids"]
                     for q in ("你好", "今天天气怎么样？"))
    whole = predictor.run_step("prefill", {"ids": second})
    for empty in (None, predictor.advance_cache):  # a part alone, or as a row of advance
        prefixes = PrefixCache(1 << 26)
        prefixes.keep(first, predictor.run_step("prefill", {"ids": first})["cache"])
        prompt = prefixes.start(second)
        shared = next(i for i, (a, b) in enumerate(zip(first[0], second[0])) if a != b)
        assert shared - 16 < prompt.tokens_done <= shared and prompt.tokens_done >= 16
        while not prompt.done:
            prefill_together(predictor.run_step, [(prompt, 7)], empty)
        np.testing.assert_allclose(prompt.outputs["logits"], whole["logits"], rtol=0,
                                   atol=4e-6 * float(np.abs(whole["logits"]).max()))
        np.testing.assert_allclose(prompt.outputs["cache"], whole["cache"], rtol=0, atol=1e-5)
        assert int(prompt.outputs["position"][0]) == int(whole["position"][0])


def test_the_service_prefills_a_shared_start_once_and_answers_as_without_it(chat_mode_folder):
    bodies = [{"text": json.dumps({"system": SYSTEM, "src": [q]}, ensure_ascii=False), "max_new_tokens": 8}
              for q in ("你好", "今天天气怎么样？", "你好")]
    answers = {}
    for budget in (64, 0):
        service = service_of(chat_mode_folder, prefix_cache_mb=budget)
        try:
            answers[budget] = []
            for body in bodies:
                status, _, text = post(service.port, "/generate", body)
                assert status == 200, text
                answers[budget].append(json.loads(text)["tokens"])
            reused = metric(service.port, "wenxin_prompt_tokens_reused_total")
            if budget:
                assert reused >= 2 * 32  # the system prompt's blocks, twice; the repeated question all but its end
            else:
                assert reused == 0
        finally:
            service.stop()
    assert answers[64] == answers[0]
