-- Creates a workflow with its tasks (see add_tasks). Returns its id.
CREATE OR REPLACE FUNCTION {{schema}}.create_workflow(p_name text, p_on_failure text, p_tasks jsonb,
                                           p_metadata jsonb DEFAULT NULL, p_batch boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM {{schema}}.validate_step_name('name', p_name);
    IF coalesce(p_on_failure, 'cancel') NOT IN ('cancel', 'continue') THEN
        RAISE EXCEPTION 'skiplock: on_failure: must be cancel or continue, got %', p_on_failure USING ERRCODE = '22023';
    END IF;
    PERFORM {{schema}}.validate_metadata(p_metadata);
    INSERT INTO {{schema}}.workflows AS w (name, on_failure, metadata, is_batch)
    VALUES (p_name, coalesce(p_on_failure, 'cancel'), p_metadata, coalesce(p_batch, false))
    RETURNING w.id INTO v_id;
    PERFORM {{schema}}.add_tasks(v_id, p_tasks);
    RETURN v_id;
END
$$;
