-- A key's time to live in the exact answer cache: its requests' answers are kept that long (0: the
-- key asks for no cache; a request or its blueprint may still).
ALTER TABLE auth.keys ADD COLUMN cache_ttl_seconds integer NOT NULL DEFAULT 0 CHECK (cache_ttl_seconds >= 0);

---- create above / drop below ----

ALTER TABLE auth.keys DROP COLUMN cache_ttl_seconds;
