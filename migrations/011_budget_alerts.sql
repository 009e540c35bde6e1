-- A key's budget alerts: the shares of its budget told when its spend crosses them, once per period
-- (NULL: the default, 0.8 and 1.0).
ALTER TABLE auth.keys ADD COLUMN budget_alerts double precision[];

---- create above / drop below ----

ALTER TABLE auth.keys DROP COLUMN budget_alerts;
