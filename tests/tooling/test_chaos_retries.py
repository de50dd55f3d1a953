"""The chaos sale's buyers decide whether to send a request again from the answer alone
(loadtest/chaoslab/buyers.py): its `retryable`, or, with no answer to go by (none came, or
one that is not JSON), a replay of the key. A scripted sale answers them: nothing waits."""

import asyncio
import json
import random
import unittest
from unittest import mock

from loadtest.chaoslab import buyers, checker


def answer(code, retryable=None, retry_after=None, **body):
    """A history event with HTTP status `code`: an error's body if `retryable` is given."""
    if retryable is not None:
        body.update(error="some_code", message="…", retryable=retryable)
    return {"status": code, "body": json.dumps(body), "retry_after": retry_after}


NO_ANSWER = {"error": "timeout"}
NOT_JSON = {"status": 502, "body": "<html>Bad Gateway</html>", "retry_after": None}
PAID = answer(201, id="o1", status="paid")


class Decision(unittest.TestCase):
    def test_the_answer_says_whether_to_retry(self):
        self.assertTrue(buyers.should_retry(answer(503, True, "1")))
        self.assertTrue(buyers.should_retry(answer(409, True, "1")))
        self.assertFalse(buyers.should_retry(answer(503, False)))
        self.assertFalse(buyers.should_retry(answer(409, False)))
        self.assertFalse(buyers.should_retry(PAID))

    def test_with_no_answer_to_go_by_a_key_is_replayed(self):
        self.assertTrue(buyers.should_retry(NO_ANSWER))
        self.assertTrue(buyers.should_retry(NOT_JSON))

    def test_the_wait_is_retry_after_up_to_two_seconds(self):
        self.assertEqual(buyers.retry_wait(answer(503, True, "1"), 0.2), 1.0)
        self.assertEqual(buyers.retry_wait(answer(503, True, "30"), 0.2), 2.0)
        self.assertEqual(buyers.retry_wait(NO_ANSWER, 0.2), 0.2)
        self.assertEqual(buyers.retry_wait(answer(503, True, "soon"), 0.5), 0.5)


class FakeHistory:
    def now(self):
        return 0.0


class ScriptedSale(buyers.Sale):
    """Answers each request with the next of `answers`, and counts them."""

    def __init__(self, answers):
        super().__init__(FakeHistory(), [1], [], "token", seed=1, client_timeout=1)
        self.answers = list(answers)
        self.sent = 0

    async def send(self, *args, **kwargs):
        self.sent += 1
        return self.answers.pop(0)


class UntilFinal(unittest.TestCase):
    def sale(self, *answers):
        sale = ScriptedSale(answers)
        # No pause between tries: what is tested is whether there is a next one.
        with mock.patch.object(buyers, "retry_wait", return_value=0.0):
            final = asyncio.run(sale.until_final("buyer-1", "order", "POST", "/orders", {},
                                                 "key-1", random.Random(1)))
        return sale.sent, final

    def test_a_retryable_answer_is_sent_again(self):
        self.assertEqual(self.sale(answer(503, True, "1"), answer(429, True, "1"), PAID), (3, PAID))

    def test_an_answer_that_is_not_retryable_is_final(self):
        final = answer(503, False)
        self.assertEqual(self.sale(final, PAID), (1, final))

    def test_no_answer_and_an_answer_that_is_not_json_are_replayed(self):
        self.assertEqual(self.sale(NO_ANSWER, NOT_JSON, PAID), (3, PAID))


class EmptyBooks:
    """A cluster whose database and ledger hold nothing: only the history is checked."""

    ledger_charges = []

    def query(self, sql):
        return []


class AnswersChecked(unittest.TestCase):
    def verdict(self, *answers):
        history = [dict(a, op="order", who="buyer-1", key=None, method="POST", path="/orders",
                        t0=0.0, t1=0.1) for a in answers]
        verdicts, _ = checker.check(history, EmptyBooks())
        return next(v for v in verdicts if v["name"] == "answers")

    def test_retry_after_comes_exactly_with_retryable(self):
        self.assertTrue(self.verdict(answer(503, True, "1"), answer(409, False), PAID)["ok"])
        late = self.verdict(answer(503, True), answer(409, False, "1"))
        self.assertEqual(late["count"], 2, late["examples"])

    def test_an_error_without_retryable_is_a_broken_answer(self):
        bare = {"status": 503, "body": json.dumps({"error": "x", "message": "y"}),
                "retry_after": "1"}
        self.assertFalse(self.verdict(bare)["ok"])


if __name__ == "__main__":
    unittest.main()
