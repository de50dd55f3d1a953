"""PostgreSQL through psql: one statement on the loopback clusters the scripts start, its
rows as unaligned text (tuples only, fields split by `separator`)."""

import os
import subprocess


class PsqlError(RuntimeError):
    """A statement that failed, or psql that did not answer in its time. A RuntimeError: the
    chaos sale counts any as a run that broke (in its checker, as an invariant not checked:
    unknown), not as a failed invariant."""


def psql(sql: str, *, port: int | str, db: str = "postgres", superuser: bool = False,
         separator: str = "|", timeout: float = 60.0) -> str:
    """The output of `sql` on database `db` of the cluster on `port`: as the role seckill over
    TCP on 127.0.0.1 (password seckill), or with `superuser` as the postgres OS user over the
    cluster's socket (runuser when root, sudo otherwise: what an extension or another
    database's statistics need). PsqlError if it fails or takes over `timeout` s."""
    cmd = ["psql", "-X", "-q", "-At", "-F", separator, "-v", "ON_ERROR_STOP=1", "-p", str(port),
           "-d", db, "-c", sql]
    env = None
    if superuser:
        cmd = (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0
               else ["sudo", "-u", "postgres"]) + cmd
    else:
        cmd += ["-h", "127.0.0.1", "-U", "seckill"]
        env = dict(os.environ, PGPASSWORD="seckill")
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise PsqlError(f"psql did not answer within {timeout:.0f} s") from e
    if out.returncode != 0:
        raise PsqlError(f"psql failed: {out.stderr.strip()}")
    return out.stdout
