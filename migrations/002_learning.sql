-- What the bandit learned. strategy_performance holds the current parameters of every (model,
-- category) arm, the all-categories arm '*' included, as undiscounted sums over the prior: alpha and
-- beta grow by reward and 1 - reward, atomically, so controllers sharing a database add up. The
-- history is append-only, one row per reward; a controller starting with a discount or a recency
-- window folds the latest rows of each arm from it.
CREATE SCHEMA learning;

CREATE TABLE learning.strategy_performance (
    model      text NOT NULL,
    category   text NOT NULL,
    alpha      double precision NOT NULL DEFAULT 0,
    beta       double precision NOT NULL DEFAULT 0,
    pulls      bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, category)
);

CREATE TABLE learning.strategy_performance_history (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model      text NOT NULL,
    category   text NOT NULL,
    reward     double precision NOT NULL,
    -- reason is contributed, poor, timeout, error, or feedback_correct, feedback_wrong, feedback_score.
    reason     text NOT NULL,
    request_id text NOT NULL,
    node_id    text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now()
);
-- The latest rewards of a model in a category, and across categories.
CREATE INDEX history_arm ON learning.strategy_performance_history (model, category, id DESC);
CREATE INDEX history_model ON learning.strategy_performance_history (model, id DESC);

---- create above / drop below ----

DROP SCHEMA learning CASCADE;
