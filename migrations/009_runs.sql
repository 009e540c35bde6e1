-- A lease per run of a controller, not per node id. A controller settles the calls a run left open only
-- once that run's lease has ended, its own earlier runs' as well as others': two processes that share
-- a node id (a restart while the old process still ends, or two controllers on one host with the host
-- name as their node id) never settle each other's calls in flight.
DROP TABLE books.nodes;

CREATE TABLE books.runs (
    node_id     text NOT NULL,
    run_id      text NOT NULL,
    started_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (node_id, run_id)
);
CREATE INDEX runs_lease ON books.runs (lease_until);

---- create above / drop below ----

DROP TABLE books.runs;

CREATE TABLE books.nodes (
    node_id     text PRIMARY KEY,
    run_id      text NOT NULL,
    started_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL
);
