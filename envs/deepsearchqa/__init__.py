"""DeepSearchQA for the interactive task: multi-hop questions answered with search[...] and answer[...].

- ``world``: a seeded synthetic world (entities, facts as documents with distractors, chain questions);
  ``generated``: a split of questions over its own world, kept when the expert answers them by searching.
- ``search``: search backends: a local BM25 index (bm25s), an HTTP search API, or the original's own search
  (SerpAPI with $SERPAPI_KEY, else DuckDuckGo's instant-answer API).
- ``answers``: ``answer_correct``, the offline grading (normalised exact / alias match).
- ``environment``: the questions as an Environment; ``prompt``: render / parse (stdlib only, copied to agents).
- ``expert``: the planner that searches a question's chain, then answers (train rows, solvability).
- ``real_data``: ``google/deepsearchqa`` by dataset id or local path, the paper's seeded 100 / 200 split.
- ``task``: the task ``deepsearchqa`` (registered); ``corpus``: the tokenizer corpus "deepsearchqa".
"""
from . import corpus, paper_task, task  # noqa: F401  (register the corpus, the task "deepsearchqa", its paper variant)
