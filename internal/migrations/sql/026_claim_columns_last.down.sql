-- Back to version 25: nothing to undo. Version 26 moved six columns of
-- jobs to the end of its row and made again, as they were, the indexes,
-- checks, views and grants that name them; a column's place in the row is
-- invisible to every statement skiplock runs (each names its columns), and
-- moving them back would rewrite the table again for nothing.
SELECT 1;
