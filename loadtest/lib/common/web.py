"""A small JSON client over HTTP (urllib, a timeout on every call), what an answer says of
sending its request again, a buyer's sign-in (the demo issuer's tokens), and an instance's
/metrics read into samples."""

import concurrent.futures
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
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


def buyer_auth(base_url: str, timeout: float = 30.0) -> str | None:
    """How the instance at `base_url` knows its buyers (GET /api/session): `demo` (it issues
    tokens itself), `jwks` (a real issuer's), `open` (the body's user_id, no token), or None
    for a build from before buyers signed in (no such route: 404)."""
    answer = request("GET", f"{base_url}/api/session", timeout=timeout)
    if answer.status == 404:
        return None
    if not answer.ok:
        raise HttpError("GET", f"{base_url}/api/session", answer)
    return answer.json()["buyer_auth"]


def sign_in(base_url: str, name: str, timeout: float = 30.0, tries: int = 5,
            sleep: Callable[[float], object] = time.sleep) -> dict[str, Any]:
    """The demo issuer's session for buyer `name` (POST /api/session): its JSON, `token`
    and `expires_in` among it. Sent again, at most `tries` times in all, when the answer says
    so (`retryable`, after its Retry-After, at most 2 s) or none came (OSError); anything else
    is HttpError (a server in `jwks` or `open` mode answers 403 `no_demo_issuer`)."""
    url = f"{base_url}/api/session"
    for attempt in range(1, tries + 1):
        try:
            answer = request("POST", url, {"name": name}, timeout=timeout)
        except OSError:
            if attempt == tries:
                raise
            sleep(0.5)
            continue
        if answer.status == 201:
            return answer.json()
        if not answer.retryable or attempt == tries:
            raise HttpError("POST", url, answer)
        sleep(min(answer.retry_after or 0.5, 2.0))
    raise AssertionError("unreachable")


def sign_in_many(base_url: str, names: Iterable[str], workers: int = 8,
                 timeout: float = 30.0) -> list[str]:
    """A token from the demo issuer for each of `names`, in their order (`workers` sign-ins
    at a time)."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return [s["token"] for s in pool.map(lambda n: sign_in(base_url, n, timeout), names)]


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
