"""A small JSON client over HTTP (urllib, a timeout on every call), what an answer says of
sending its request again, and an instance's /metrics read into samples."""

import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

# Every URL the scripts call is on 127.0.0.1: a proxy from the environment must not take it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def retryable(body: str | None) -> bool | None:
    """What an answer's body says of sending the same request again: its `retryable` (a
    success has none: False). None when the body is not a JSON object: that is no answer to
    go by, as when none came at all (a cut connection, a proxy's page)."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return None
    return parsed.get("retryable") is True if isinstance(parsed, dict) else None


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: its status, its headers (names in lower case), its body as text."""

    status: int
    headers: Mapping[str, str]
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed, or None if it is not JSON."""
        try:
            return json.loads(self.text)
        except ValueError:
            return None

    @property
    def retryable(self) -> bool | None:
        return retryable(self.text)

    @property
    def retry_after(self) -> float | None:
        """Retry-After in seconds, if the answer carries it."""
        try:
            return float(self.headers["retry-after"])
        except (KeyError, ValueError):
            return None


class HttpError(RuntimeError):
    """A call that had to succeed and was answered otherwise; `answer` is what came."""

    def __init__(self, method: str, url: str, answer: Answer):
        super().__init__(f"{method} {url}: {answer.status} {answer.text[:200]}")
        self.answer = answer


def _answer(status: int, headers: Message, raw: bytes) -> Answer:
    names = {k.lower(): v for k, v in headers.items()}
    return Answer(status, names, raw.decode("utf-8", "replace"))


def request(method: str, url: str, body: Any = None, token: str | None = None,
            timeout: float = 30.0) -> Answer:
    """One request (`body` sent as JSON; `token` as a bearer token) and its answer, an error
    status's too. Raises OSError (URLError, a timeout) when no answer came."""
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with _OPENER.open(req, timeout=timeout) as res:
            return _answer(res.status, res.headers, res.read())
    except urllib.error.HTTPError as e:
        with e:
            return _answer(e.code, e.headers, e.read())


def http_json(method: str, url: str, body: Any = None, token: str | None = None,
              timeout: float = 30.0) -> Any:
    """A call that must succeed: its answer's JSON. HttpError for any status but 2xx."""
    answer = request(method, url, body, token, timeout)
    if not answer.ok:
        raise HttpError(method, url, answer)
    return answer.json()


@dataclass(frozen=True)
class Sample:
    """One line of a Prometheus text page: `name{labels} value`."""

    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE = re.compile(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text page (comments and blank lines skipped)."""
    samples = []
    for line in text.splitlines():
        if line.startswith("#") or not (m := _SAMPLE.match(line.strip())):
            continue
        samples.append(Sample(m.group(1), dict(_LABEL.findall(m.group(2) or "")),
                              float(m.group(3))))
    return samples


def metrics(base_url: str, timeout: float = 30.0) -> list[Sample]:
    """An instance's samples (GET base_url/metrics, which must answer 200)."""
    answer = request("GET", f"{base_url}/metrics", timeout=timeout)
    if not answer.ok:
        raise HttpError("GET", f"{base_url}/metrics", answer)
    return parse_metrics(answer.text)
