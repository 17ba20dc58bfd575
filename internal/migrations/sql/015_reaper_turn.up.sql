-- The reaper's turn (issue 15 §2). Every process reaps expired leases on
-- its own timer, and a reap reads the whole running set through
-- jobs_running: cheap while vacuum keeps up, but while a long transaction
-- pins the horizon every job finished since the pin leaves a dead entry
-- there, and a fleet of N processes paid for them N times per interval.
-- Now a process reaps only when it takes the turn: the one row here says
-- when the fleet last reaped (reaped_at, by whom) and, after a slow reap,
-- before when nobody should reap again (not_before). Taking the turn is one
-- UPDATE of this row (HOT: no index covers either column), so the fleet
-- reaps about once per interval whatever its size. Each process compares
-- reaped_at with its own interval, so one configured with a short lease
-- still reaps as often as it needs. The row is recreated by the turn
-- statement itself if it ever goes missing: a lost row must never stop the
-- reaper.
CREATE TABLE {{schema}}.reaper_turn (
    id         integer     PRIMARY KEY CHECK (id = 1),
    reaped_at  timestamptz NOT NULL,
    not_before timestamptz NOT NULL,
    holder     text        NOT NULL
) WITH (fillfactor = 10);

INSERT INTO {{schema}}.reaper_turn (id, reaped_at, not_before, holder) VALUES (1, '-infinity', '-infinity', '');
