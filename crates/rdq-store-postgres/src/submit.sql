-- Transactional enqueue (docs/stores/postgres.md, "Submitting inside your
-- transaction"): @schema@.submit(...) writes one PENDING task in the
-- caller's transaction, exactly as an rdq node's submit writes it: the
-- same row, the same count delta, the same wake-up (a NOTIFY, delivered
-- at commit), and the envelope in the canonical encoding of rdq's codec
-- (docs/envelope.md), byte for byte. A fresh task's envelope is a fixed
-- sequence of members, so it is written out here member by member; the
-- codec's tests hold this text to the codec's own output.
--
-- Bad input raises an exception whose message starts with rdq's stable
-- code (`INVALID_QUEUE_NAME: …`) and SQLSTATE 22023 (invalid_parameter_value);
-- nothing is written and the caller's transaction is aborted, as any
-- failed statement aborts it.

-- What these functions cost. PL/pgSQL sets up each expression it evaluates
-- once per transaction, at a price that grows with the expression's
-- function calls, and `submit` is usually called once in a transaction;
-- so the common path evaluates few expressions with few calls: one
-- decides that every argument is well formed, one writes the envelope,
-- and the task id's text is looked up ten bits at a time.

-- The two Crockford base32 digits of every 10-bit value, in order, as
-- bytes (a byte string's slices are found in constant time; a text's by
-- counting characters). Computed once, here, into a constant.
DO $do$
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION @schema@.base32_pairs() RETURNS bytea '
        'LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS %L',
        format('SELECT %L::bytea',
               (SELECT '\x' || string_agg(encode(convert_to(substr(a, i / 32 + 1, 1)
                                                            || substr(a, i % 32 + 1, 1), 'UTF8'), 'hex'),
                                          '' ORDER BY i)
                FROM generate_series(0, 1023) i,
                     (SELECT text '0123456789ABCDEFGHJKMNPQRSTVWXYZ' AS a) digits)));
END
$do$;

-- A task id's text from its 128 bits as two 64-bit halves: the ULID
-- (Crockford base32) of the bits with two zero bits in front, 130 bits
-- read ten at a time, two digits each. One IMMUTABLE expression, so a
-- caller's plan inlines it (`encode(…, 'escape')` leaves these bytes as
-- they are; `convert_from` is only STABLE and would stop the inlining).
CREATE OR REPLACE FUNCTION @schema@.ulid_text(hi bigint, lo bigint) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(
           substring(@schema@.base32_pairs() FROM ((hi >> 56) & 255)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((hi >> 46) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((hi >> 36) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((hi >> 26) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((hi >> 16) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((hi >> 6) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM (((hi & 63) << 4) | ((lo >> 60) & 15))::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((lo >> 50) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((lo >> 40) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((lo >> 30) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((lo >> 20) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM ((lo >> 10) & 1023)::int * 2 + 1 FOR 2)
        || substring(@schema@.base32_pairs() FROM (lo & 1023)::int * 2 + 1 FOR 2), 'escape')
$$;

-- A task id's text from its uuid.
CREATE OR REPLACE FUNCTION @schema@.task_id_text(id uuid) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    hex constant text := replace(id::text, '-', '');
    hi  constant bigint := ('x' || left(hex, 16))::bit(64)::bigint;
    lo  constant bigint := ('x' || right(hex, 16))::bit(64)::bigint;
BEGIN
    RETURN @schema@.ulid_text(hi, lo);
END
$$;

-- A timestamp's text in the envelope: RFC 3339, milliseconds, UTC.
-- STABLE as `to_char` is, so a caller's plan inlines it (an IMMUTABLE
-- wrapper of a STABLE body is run as a separate SQL function, five times
-- the cost).
CREATE OR REPLACE FUNCTION @schema@.instant_text(ms bigint) RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT to_char((timestamptz 'epoch' + ms * interval '1 millisecond') AT TIME ZONE 'UTC',
                   'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Raises rdq's stable `code` for `field`.
CREATE OR REPLACE FUNCTION @schema@.refuse(code text, field text, why text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = code || ': ' || field || ': ' || why,
        DETAIL = field, HINT = code;
END
$$;

-- A queue name or handler ref: 1 to 240 bytes of [a-z0-9._-], not `.` or `..`.
CREATE OR REPLACE FUNCTION @schema@.check_name(name text, code text, field text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF name IS NULL OR name = '' THEN
        PERFORM @schema@.refuse(code, field, 'must not be empty');
    ELSIF name IN ('.', '..') THEN
        PERFORM @schema@.refuse(code, field, format('%s is a path segment, not a name', to_json(name)));
    ELSIF octet_length(name) > 240 THEN
        PERFORM @schema@.refuse(code, field,
            format('is %s bytes long; the limit is 240', octet_length(name)));
    ELSIF name !~ '^[a-z0-9._-]+$' THEN
        PERFORM @schema@.refuse(code, field,
            format('%s has characters outside [a-z0-9._-]', to_json(name)));
    END IF;
END
$$;

-- 1 to `max` characters, or NULL.
CREATE OR REPLACE FUNCTION @schema@.check_short(value text, field text, max integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF value IS NOT NULL AND (value = '' OR char_length(value) > max) THEN
        PERFORM @schema@.refuse('INVALID_FIELD', field, format('must be 1 to %s characters', max));
    END IF;
END
$$;

-- Every check of a submit's arguments, in order, raising the first one's
-- code; the headers the task carries (with `rdq.flow_key` for a flow key)
-- when all pass.
CREATE OR REPLACE FUNCTION @schema@.checked_headers(
    queue                text,
    handler_ref          text,
    payload              bytea,
    payload_content_type text,
    headers              jsonb,
    priority             integer,
    delay_ms             bigint,
    idempotency_key      text,
    handler_version      text,
    flow_key             text
) RETURNS jsonb
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    all_headers jsonb;
    header      record;
BEGIN
    PERFORM @schema@.check_name(queue, 'INVALID_QUEUE_NAME', 'queue');
    PERFORM @schema@.check_name(handler_ref, 'INVALID_HANDLER_REF', 'handler_ref');
    IF payload IS NULL THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'payload', 'must not be null (an empty payload is ''\x'')');
    END IF;
    IF payload_content_type IS NULL THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'payload_content_type', 'must not be null');
    END IF;
    PERFORM @schema@.check_short(payload_content_type, 'payload_content_type', 255);
    PERFORM @schema@.check_short(handler_version, 'handler_version', 255);
    PERFORM @schema@.check_short(idempotency_key, 'idempotency_key', 255);
    IF priority IS NULL OR priority < 0 OR priority > 255 THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'priority', 'must be 0 to 255');
    END IF;
    IF delay_ms IS NULL OR delay_ms < 0 THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'delay_ms', 'must be 0 or more');
    END IF;
    all_headers := coalesce(headers, '{}');
    IF jsonb_typeof(all_headers) <> 'object' THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'headers', 'must be a JSON object of strings');
    END IF;
    FOR header IN SELECT key, value FROM jsonb_each(all_headers) LOOP
        IF jsonb_typeof(header.value) <> 'string' THEN
            PERFORM @schema@.refuse('INVALID_FIELD', 'headers.' || header.key, 'must be a string');
        END IF;
        IF lower(left(header.key, 4)) = 'rdq.' THEN
            PERFORM @schema@.refuse('RESERVED_HEADER', 'headers.' || header.key,
                format('header %s uses the prefix "rdq.", which is reserved for system metadata',
                       to_json(header.key)));
        END IF;
    END LOOP;
    IF flow_key IS NOT NULL THEN
        IF flow_key = '' THEN
            PERFORM @schema@.refuse('INVALID_FIELD', 'flow_key', 'must not be empty');
        ELSIF octet_length(flow_key) > 128 THEN
            PERFORM @schema@.refuse('INVALID_FIELD', 'flow_key',
                format('is %s bytes long; the limit is 128', octet_length(flow_key)));
        ELSIF flow_key !~ '^[A-Za-z0-9._:/@=+-]+$' THEN
            PERFORM @schema@.refuse('INVALID_FIELD', 'flow_key',
                format('%s has characters outside [A-Za-z0-9._:/@=+-]', to_json(flow_key)));
        END IF;
        all_headers := all_headers || jsonb_build_object('rdq.flow_key', flow_key);
    END IF;
    RETURN all_headers;
END
$$;

-- Headers' text in the envelope: members sorted by key (bytewise), as the
-- codec writes them.
CREATE OR REPLACE FUNCTION @schema@.headers_text(headers jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce('{' || string_agg(to_json(key)::text || ':' || value::text, ','
                                      ORDER BY key COLLATE "C") || '}', '{}')
    FROM jsonb_each(headers)
$$;

CREATE OR REPLACE FUNCTION @schema@.submit(
    queue                text,
    handler_ref          text,
    payload              bytea   DEFAULT '\x',
    payload_content_type text    DEFAULT 'application/octet-stream',
    headers              jsonb   DEFAULT '{}',
    priority             integer DEFAULT 0,
    delay_ms             bigint  DEFAULT 0,
    idempotency_key      text    DEFAULT NULL,
    handler_version      text    DEFAULT NULL,
    flow_key             text    DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    now_ms      bigint;
    random      text;
    hi          bigint;
    lo          bigint;
    id          uuid;
    id_text     text;
    all_headers jsonb;
    envelope    text;
    max_bytes   bigint;
    existing    uuid;
    inserted    bigint;
BEGIN
    -- The common case (no headers, no flow key, every argument well
    -- formed) in one expression; anything else through the checks, which
    -- say what is wrong. (A bounded repetition such as {1,240} makes a
    -- regular expression ten times slower than `+` and a length test.)
    all_headers := CASE
        WHEN queue ~ '^[a-z0-9._-]+$' AND octet_length(queue) <= 240 AND queue NOT IN ('.', '..')
         AND handler_ref ~ '^[a-z0-9._-]+$' AND octet_length(handler_ref) <= 240
         AND handler_ref NOT IN ('.', '..')
         AND payload IS NOT NULL
         AND payload_content_type <> '' AND char_length(payload_content_type) <= 255
         AND (handler_version IS NULL OR handler_version <> '' AND char_length(handler_version) <= 255)
         AND (idempotency_key IS NULL OR idempotency_key <> '' AND char_length(idempotency_key) <= 255)
         AND priority BETWEEN 0 AND 255 AND delay_ms >= 0
         AND (headers IS NULL OR headers = '{}') AND flow_key IS NULL
        THEN jsonb '{}'
        ELSE @schema@.checked_headers(queue, handler_ref, payload, payload_content_type, headers,
                                      priority, delay_ms, idempotency_key, handler_version, flow_key)
    END;

    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    -- The latest instant an envelope holds: 9999-12-31T23:59:59.999Z.
    IF delay_ms > 253402300799999 - now_ms THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'delay_ms', 'puts the task past the year 9999');
    END IF;
    -- A ULID: 48 bits of milliseconds, then 80 bits of a random uuid (its
    -- first 16 and its last 64, two of which are its fixed variant bits).
    random := replace(gen_random_uuid()::text, '-', '');
    hi := (now_ms << 16) | ('x' || left(random, 4))::bit(16)::int;
    lo := ('x' || right(random, 16))::bit(64)::bigint;
    id := (lpad(to_hex(hi), 16, '0') || lpad(to_hex(lo), 16, '0'))::uuid;
    id_text := @schema@.ulid_text(hi, lo);
    -- (A queue name and a handler ref need no escaping in JSON.)
    envelope := '{"envelope_version":1,"id":"' || id_text
        || '","queue":"' || queue
        || '","handler_ref":"' || handler_ref || '"'
        || ',"handler_version":' || coalesce(to_json(handler_version)::text, 'null')
        || ',"payload":"' || translate(encode(payload, 'base64'), E'\n', '')
        || '","payload_content_type":' || to_json(payload_content_type)::text
        || ',"headers":' || CASE WHEN all_headers = '{}' THEN '{}' ELSE @schema@.headers_text(all_headers) END
        || ',"status":"PENDING","priority":' || priority
        || ',"deferral_count":0,"attempt_count":0,"redrive_count":0,"claim_count":0'
        || ',"next_attempt_at":"' || @schema@.instant_text(now_ms + delay_ms)
        || '","lease_expires_at":null,"created_at":"' || @schema@.instant_text(now_ms)
        || '","attempts":[]}';

    -- The row, if the envelope fits the queue's limit, with its flow key
    -- when the queue is flow-controlled. Only an idempotency key can
    -- conflict (the id is fresh); without one the insert needs no ON
    -- CONFLICT, which checks every unique index first.
    IF idempotency_key IS NULL THEN
        INSERT INTO @schema@.tasks AS t (id, queue, status, priority, next_attempt_at,
                                        lease_expires_at, claim_count, error_type, finished_at,
                                        envelope, idempotency_key, flow_key)
            SELECT id, queue, 0, priority, now_ms + delay_ms, NULL, 0, NULL, NULL,
                   convert_to(envelope, 'UTF8'), NULL,
                   CASE WHEN EXISTS (SELECT 1 FROM @schema@.flow_queues f WHERE f.queue = submit.queue)
                        THEN coalesce(all_headers ->> 'rdq.flow_key', '') END
            WHERE octet_length(envelope) <= coalesce(
                (SELECT (q.policy::jsonb ->> 'max_envelope_bytes')::bigint
                 FROM @schema@.queues q WHERE q.name = submit.queue), 1048576);
    ELSE
        INSERT INTO @schema@.tasks AS t (id, queue, status, priority, next_attempt_at,
                                        lease_expires_at, claim_count, error_type, finished_at,
                                        envelope, idempotency_key, flow_key)
            SELECT id, queue, 0, priority, now_ms + delay_ms, NULL, 0, NULL, NULL,
                   convert_to(envelope, 'UTF8'), convert_to(idempotency_key, 'UTF8'),
                   CASE WHEN EXISTS (SELECT 1 FROM @schema@.flow_queues f WHERE f.queue = submit.queue)
                        THEN coalesce(all_headers ->> 'rdq.flow_key', '') END
            WHERE octet_length(envelope) <= coalesce(
                (SELECT (q.policy::jsonb ->> 'max_envelope_bytes')::bigint
                 FROM @schema@.queues q WHERE q.name = submit.queue), 1048576)
            ON CONFLICT DO NOTHING;
    END IF;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted = 0 THEN
        SELECT coalesce((SELECT (q.policy::jsonb ->> 'max_envelope_bytes')::bigint
                         FROM @schema@.queues q WHERE q.name = submit.queue), 1048576)
            INTO max_bytes;
        IF octet_length(envelope) > max_bytes THEN
            PERFORM @schema@.refuse('PAYLOAD_TOO_LARGE', 'payload',
                format('the envelope is %s bytes; the queue takes at most %s', octet_length(envelope), max_bytes));
        END IF;
        -- The task that holds the idempotency key is the answer, as for
        -- any submit.
        SELECT t.id INTO existing FROM @schema@.tasks t
            WHERE t.queue = submit.queue AND t.idempotency_key = convert_to(submit.idempotency_key, 'UTF8');
        IF existing IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '40001',
                MESSAGE = 'STORE_UNAVAILABLE: the task holding this idempotency key went away meanwhile; submit again';
        END IF;
        RETURN @schema@.task_id_text(existing);
    END IF;
    INSERT INTO @schema@.queue_counts (queue, pending, in_flight, succeeded, dead)
        VALUES (queue, 1, 0, 0, 0);
    -- One wake-up per queue among the transactions submitting at once. A
    -- NOTIFY makes PostgreSQL commit its transaction alone (it holds a lock
    -- from before the commit until the commit is on disk), so a NOTIFY in
    -- each of 64 concurrent transactions costs 64 disk flushes one after
    -- the other. The first transaction of a burst notifies; those open
    -- while it is skip it: their tasks are claimed with the burst or, at
    -- worst, by the workers' fallback poll (200 ms by default).
    IF pg_try_advisory_xact_lock(hashtext('rdq.wake.@schema@'), hashtext(queue)) THEN
        PERFORM pg_notify('rdq_@schema@', 'w sql ' || queue);
    END IF;
    RETURN id_text;
END
$$;

-- @schema@.submit with a JSON payload (content type application/json): the
-- payload's bytes are the JSON text as given.
CREATE OR REPLACE FUNCTION @schema@.submit_json(
    queue           text,
    handler_ref     text,
    payload         json,
    headers         jsonb   DEFAULT '{}',
    priority        integer DEFAULT 0,
    delay_ms        bigint  DEFAULT 0,
    idempotency_key text    DEFAULT NULL,
    handler_version text    DEFAULT NULL,
    flow_key        text    DEFAULT NULL
) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT @schema@.submit(queue, handler_ref, convert_to(payload::text, 'UTF8'),
                           'application/json', headers, priority, delay_ms,
                           idempotency_key, handler_version, flow_key)
$$;

-- Transactional complete (docs/stores/postgres.md, "Completing inside your
-- transaction"): @schema@.complete(id, lease_token) settles a claimed task
-- as SUCCEEDED in the caller's transaction, fenced like every settle: the
-- token must be the one its claim handed out (a keyed MAC over the task
-- and the claim, checked here with the store's secret), and that claim
-- must still be the task's current one. A worker whose lease lapsed and
-- whose task was claimed again gets LEASE_LOST and rolls back its own
-- writes with it. Only the row's columns change: the stored envelope stays
-- the claimed state, and every read computes the SUCCEEDED envelope from
-- it and the finish time, as rdq's codec would have written it.

-- A task id's uuid from its text (26 characters of upper-case Crockford
-- base32), NULL when it is not one.
CREATE OR REPLACE FUNCTION @schema@.task_id_uuid(id text) RETURNS uuid
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    bits varbit := B'';
    v    integer;
    hex  text := '';
    i    integer;
BEGIN
    IF id IS NULL OR length(id) <> 26 OR left(id, 1) > '7' THEN
        RETURN NULL;
    END IF;
    FOR i IN 1..26 LOOP
        v := strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(id, i, 1)) - 1;
        IF v < 0 THEN
            RETURN NULL;
        END IF;
        bits := bits || v::bit(5);
    END LOOP;
    FOR i IN 0..31 LOOP
        hex := hex || to_hex(substring(bits FROM 3 + i * 4 FOR 4)::bit(4)::integer);
    END LOOP;
    RETURN hex::uuid;
END
$$;

-- The MAC part of the lease token of claim `claim` of task `id`:
-- HMAC-SHA256 under the store's lease secret over a domain tag, the id and
-- the claim, cut to 16 bytes, in lower-case hex (rdq's lease tokens).
-- Built from the core `sha256()` (PostgreSQL 11+) by the RFC 2104
-- construction, because `hmac()` belongs to the pgcrypto extension, which a
-- database may not have and rdq does not install. The secret is at most 64
-- bytes (one SHA-256 block), so it is only padded, never hashed first.
CREATE OR REPLACE FUNCTION @schema@.lease_mac(id uuid, claim bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    secret bytea;
    ipad   bytea;
    opad   bytea;
    i      integer;
BEGIN
    SELECT value INTO secret FROM @schema@.secrets WHERE name = 'lease_secret';
    IF secret IS NULL THEN
        RETURN NULL;
    END IF;
    secret := secret || decode(repeat('00', 64 - octet_length(secret)), 'hex');
    ipad := secret;
    opad := secret;
    FOR i IN 0..63 LOOP
        ipad := set_byte(ipad, i, get_byte(secret, i) # 54);
        opad := set_byte(opad, i, get_byte(secret, i) # 92);
    END LOOP;
    RETURN encode(substring(sha256(opad || sha256(ipad
        || convert_to('rdq.lease_token.v1', 'UTF8') || uuid_send(id)
        || substring(int8send(claim) FROM 5 FOR 4))) FROM 1 FOR 16), 'hex');
END
$$;

CREATE OR REPLACE FUNCTION @schema@.complete(id text, lease_token text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    task    uuid;
    claim   bigint;
    now_ms  bigint;
    q       text;
BEGIN
    task := @schema@.task_id_uuid(id);
    IF task IS NULL THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'id', format('%s is not a task id', to_json(id)));
    END IF;
    IF lease_token IS NULL OR lease_token !~ '^[0-9]{1,10}\.[0-9a-f]{32}$'
        OR split_part(lease_token, '.', 1)::bigint > 4294967295 THEN
        PERFORM @schema@.refuse('INVALID_FIELD', 'lease_token', 'is not a lease token');
    END IF;
    claim := split_part(lease_token, '.', 1)::bigint;
    IF @schema@.lease_mac(task, claim) IS DISTINCT FROM split_part(lease_token, '.', 2) THEN
        RAISE EXCEPTION USING ERRCODE = '55000', HINT = 'LEASE_LOST', DETAIL = 'lease_token',
            MESSAGE = 'LEASE_LOST: the lease token was not issued for task ' || id;
    END IF;
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    UPDATE @schema@.tasks t SET status = 2, finished_at = now_ms, error_type = NULL,
            cancel_requested = false
        WHERE t.id = task AND t.status = 1 AND t.claim_count = claim
        RETURNING t.queue INTO q;
    IF q IS NULL THEN
        IF EXISTS (SELECT 1 FROM @schema@.tasks t WHERE t.id = task) THEN
            RAISE EXCEPTION USING ERRCODE = '55000', HINT = 'LEASE_LOST', DETAIL = 'lease_token',
                MESSAGE = 'LEASE_LOST: task ' || id || ' is no longer held by this lease';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'P0002', HINT = 'TASK_NOT_FOUND', DETAIL = 'id',
            MESSAGE = 'TASK_NOT_FOUND: task ' || id || ' does not exist';
    END IF;
    INSERT INTO @schema@.queue_counts (queue, pending, in_flight, succeeded, dead)
        VALUES (q, 0, -1, 1, 0);
END
$$;
