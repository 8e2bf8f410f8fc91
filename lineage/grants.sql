-- The read-only role `evotrainer sql` switches to. Needs CREATEROLE-level privileges;
-- without them the store works and `evotrainer sql` relies on its read-only transaction.
DO $$
BEGIN
    GRANT USAGE ON SCHEMA projections TO evotrainer_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA projections TO evotrainer_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO evotrainer_reader;
    GRANT EXECUTE ON FUNCTION branch_history(text), branch_ancestry(text) TO evotrainer_reader;
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE format('GRANT evotrainer_reader TO %I', current_user);
    END IF;
EXCEPTION WHEN insufficient_privilege OR undefined_object THEN
    RAISE NOTICE 'evotrainer_reader grants skipped: %', SQLERRM;
END
$$;
