"""ZooKeeper's four-letter words (ruok, srvr, mntr...) over a plain socket: a server's mode
and its last zxid, asked without a client library."""

import socket


def four_letters(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """The server's whole answer to `word` (it writes it and closes). OSError when it is not
    there or does not answer within `timeout` s."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out.decode(errors="replace")


def srvr(host: str, port: int, timeout: float = 2.0) -> dict[str, str]:
    """`srvr`'s `Name: value` lines (Mode, Zxid, Node count...)."""
    lines = (line.partition(":") for line in four_letters(host, port, "srvr", timeout).splitlines())
    return {name.strip(): value.strip() for name, colon, value in lines if colon}


def zxid(connect: str, timeout: float = 5.0) -> int:
    """The last zxid of the first server of a connect string (`host:port,...`): it grows by
    one per write to the ensemble, whoever the client."""
    host, port = connect.split(",")[0].rsplit(":", 1)
    return int(srvr(host, int(port), timeout)["Zxid"], 16)
