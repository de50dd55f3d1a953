"""What the load and chaos scripts share, written once (standard library only):

- `text`: a coloured log line, a report's figures;
- `wait`: waiting for a condition, within a time;
- `web`: a small JSON client over HTTP, what an answer says of trying again, /metrics;
- `zk`: ZooKeeper's four-letter words;
- `pg`: one statement through psql;
- `svg`: the pieces every chart is drawn from.
"""
