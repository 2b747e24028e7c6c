"""WebShop (Yao et al., 2022) as an offline environment: a generated store with the original's pages, actions, search
and reward, or the original's data when a user has it.

- ``catalogue``: the seeded product catalogue and shopping instructions (train / eval, disjoint products);
- ``search``: BM25 (bm25s) over the products; ``shop``: the pages and actions; ``reward``: the original's formula;
- ``environment``: the store as an Environment; ``task``: the task ``webshop`` (registered) and its train rows;
- ``prompt``: render / parse, the one prompt / reply format of the training data, the grader and the agents;
- ``expert``: a planner that knows the target, for the train rows;
- ``real_data``: upstream product, instruction and human-trajectory files;
- ``corpus``: WebShop-like text for the tiny model's tokenizer (base model ``tiny-webshop``).
"""
from . import corpus, paper_task, task  # noqa: F401  (register the corpus, the task "webshop", its paper variant)
