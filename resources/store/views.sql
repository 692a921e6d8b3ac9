-- Views over the tables of `schema.sql` at the latest shape: created after the migrations, which may
-- add the columns they read.
-- The summaries that lead their session's account: judged ok, and not the embedded SmolLM2's
-- ({embedded_model}). Read blind, none of that model's summaries was worth reading, the ones its verdict
-- calls ok included (BENCHMARKS.md §21), and asked only for the outcome it did no better (§31): its
-- summaries stay beside the card (`show`), the card leads.
CREATE OR REPLACE VIEW leading_summaries AS
SELECT session_id FROM session_summaries WHERE verdict = 'ok' AND model IS DISTINCT FROM '{embedded_model}';

-- Each session's account: its leading summary where it has one, else its card; never a junk summary.
CREATE OR REPLACE VIEW session_accounts AS
SELECT x.session_id, 'summary' AS account, x.title, x.summary, c.line, x.category, x.technologies, x.quality,
       x.productivity, x.impact, x.complexity, x.memory_count, x.source_tier, x.degraded, x.raw_canonical,
       x.origin, x.verdict, x.model, x.created_at, s.project
FROM session_summaries x JOIN leading_summaries USING (session_id) JOIN sessions s USING (session_id)
     LEFT JOIN session_cards c USING (session_id)
UNION ALL
SELECT c.session_id, 'card', c.title, c.text, c.line, NULL, []::VARCHAR[], NULL, NULL, NULL, NULL, s.turn_count,
       c.source_tier, c.degraded, c.raw_canonical, 'facts', NULL, NULL, s.updated_at, s.project
FROM session_cards c JOIN sessions s USING (session_id)
WHERE NOT EXISTS (SELECT 1 FROM leading_summaries x WHERE x.session_id = c.session_id);
