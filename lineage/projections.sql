-- Projections: tables derived from the event log only, rebuildable byte-identically.
-- `{schema}` is `projections` for the live copy and a scratch schema for
-- `evotrainer replay --projections`. Every row names the event that produced it
-- (experiment, branch, seq, position). Applied by migrations, never edited in place:
-- a change to a projection is a new revision that drops and rebuilds it.

CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE {schema}.branch_state (
    experiment   text NOT NULL,
    branch       text NOT NULL,
    parent       text,
    fork_seq     bigint NOT NULL DEFAULT 0,
    head_seq     bigint NOT NULL,
    head_hash    text NOT NULL,
    head_position bigint NOT NULL,
    events       bigint NOT NULL,
    status       text NOT NULL DEFAULT 'running',
    last_score   double precision,
    best_score   double precision,
    PRIMARY KEY (experiment, branch)
);

CREATE TABLE {schema}.policies (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    policy_sha256 text NOT NULL, parent_sha256 text, kind text, parameters bigint, size_bytes bigint, source text
);
CREATE INDEX ON {schema}.policies (policy_sha256);

CREATE TABLE {schema}.harness_versions (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    harness_hash text NOT NULL, parent_hash text, changed_fields jsonb, spec jsonb
);
CREATE INDEX ON {schema}.harness_versions (harness_hash);

CREATE TABLE {schema}.diagnoses (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    evidence_sha256 text, harness_hash text, conditions jsonb, blocking boolean, findings jsonb
);
CREATE INDEX ON {schema}.diagnoses (experiment, branch);

CREATE TABLE {schema}.interventions (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    intervention_id text NOT NULL, field text, old_value jsonb, new_value jsonb, hypothesis text,
    success_criterion text, rollback_plan text, proposer text
);
CREATE INDEX ON {schema}.interventions (experiment, intervention_id);

CREATE TABLE {schema}.backtests (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    intervention_id text NOT NULL, kind text, evidence_sha256 text, passed boolean, figures jsonb, criterion text
);
CREATE INDEX ON {schema}.backtests (experiment, intervention_id);

CREATE TABLE {schema}.evaluations (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    policy_sha256 text, metric text, avg_at_k double precision, pass_at_k double precision, k int,
    problems int, results_sha256 text
);
CREATE INDEX ON {schema}.evaluations (experiment, branch, seq);

CREATE TABLE {schema}.promotions (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    candidate text NOT NULL, decision text NOT NULL, baseline_score double precision,
    candidate_score double precision, margin double precision, blocking_findings jsonb,
    intervention_id text, reason text
);
CREATE INDEX ON {schema}.promotions (experiment);

CREATE TABLE {schema}.skills (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    skill_id text NOT NULL, trigger text, intervention text, expected_outcome text, category text,
    domains jsonb, successes int, failures int, effect_size double precision
);

-- Skills brought in from a skills file (`evotrainer skills import`): the source's counts,
-- kept apart from the outcomes recorded here; `origin`: the file, its sha256 and where it was
-- exported from.
CREATE TABLE {schema}.imported_skills (
    position bigint PRIMARY KEY, experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL,
    skill_id text NOT NULL, trigger text, intervention text, expected_outcome text, category text,
    successes int, failures int, effect_sizes jsonb, validated_in jsonb, tried_in jsonb, change jsonb, origin jsonb
);

CREATE TABLE {schema}.tasks (
    experiment text NOT NULL, branch text NOT NULL, task_id text NOT NULL,
    kind text, queue text, status text NOT NULL, attempts int NOT NULL DEFAULT 0, worker text,
    requested_seq bigint NOT NULL, requested_position bigint NOT NULL, finished_position bigint,
    error_class text,
    PRIMARY KEY (experiment, branch, task_id)
);

CREATE TABLE {schema}.artifacts (
    sha256 text PRIMARY KEY, role text NOT NULL,
    experiment text NOT NULL, branch text NOT NULL, seq bigint NOT NULL, position bigint NOT NULL
);
