"""One vLLM engine in a process of its own, run by the vLLM environment's python (scripts/setup --vllm), driven by
evaluators/backends/vllm_backend.py over its stdin (requests) and stdout (answers), one JSON object a line.

    python vllm_worker.py '{"model": DIR, ...LLM keyword arguments}'
      <- {"ok": true, "op": "ready", "start_s": ...}                  once the engine is up (or {"ok": false, "error"})
      -> {"op": "reload", "model": DIR}                              load DIR's weights into the running engine
      -> {"op": "generate", "prompts": [[ids]], "max_tokens": N, "stop_token_ids": [...], "stop": [strings],
          "repetition_penalty": R}
      <- {"ok": true, "outputs": [[ids]]}                            greedy, one token list per prompt, in order
      -> {"op": "close"}

Only the stdlib and vLLM are imported here (the main environment's packages are not on this interpreter's path).
The engine gets token ids and returns token ids: the grader tokenises with the submission's own tokenizer and chat
template, exactly as the transformers backend does, and decodes the reply itself. The engine's tokenizer (the first
model's; the backend starts a new engine for a submission whose tokenizer decodes otherwise) serves one purpose:
stopping a reply at its stop strings inside the engine, as the original's vLLM does, instead of decoding
max_tokens and cutting after. Everything vLLM prints goes
to stderr; stdout carries only answers. The process group is the engine's: the backend kills it whole on teardown,
and a watchdog kills it when the grader's process is gone (a SIGKILLed replica leaves no engine behind).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time


class ReloadExtension:
    """Mixed into vLLM's worker (`worker_extension_cls`): reload weights from a directory in place."""

    def a2rl_reload(self, model_dir: str) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
        from vllm.platforms import current_platform

        self.reload_weights(weights_path=model_dir)
        if not current_platform.is_cpu():
            return
        # vLLM 0.32's in-place reload skips a layer that loads no tensor of its own: on a CPU a tied lm_head keeps
        # its kernel's packed copy of the old embedding (its replies differed from a fresh engine's). Re-derive
        # every embedding's kernel state from the weights now loaded.
        for module in self.model_runner.get_model().modules():
            if isinstance(module, VocabParallelEmbedding):
                module.quant_method.process_weights_after_loading(module)


def _die_with_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:  # re-parented: the grader's process is gone
            os.killpg(os.getpgrp(), signal.SIGKILL)


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM's prints must not reach the answer stream
    threading.Thread(target=_die_with_parent, args=(os.getppid(),), daemon=True).start()

    def answer(**fields) -> None:
        answers.write(json.dumps(fields) + "\n")

    args = json.loads(sys.argv[1])
    started = time.monotonic()
    try:
        from vllm import LLM, SamplingParams

        llm = LLM(args.pop("model"), worker_extension_cls="vllm_worker.ReloadExtension", **args)
    except Exception as e:  # noqa: BLE001 - the reason goes to the grader (a submission's 422)
        answer(ok=False, error=f"{type(e).__name__}: {e}")
        return
    answer(ok=True, op="ready", start_s=time.monotonic() - started)
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "close":
            break
        try:
            if op == "reload":
                started = time.monotonic()
                llm.collective_rpc("a2rl_reload", args=(request["model"],))
                llm.reset_prefix_cache()  # cached blocks hold the old weights' keys and values
                answer(ok=True, reload_s=time.monotonic() - started)
            elif op == "generate":
                stop = request.get("stop") or None  # matched on the reply's text only, as the backend cuts it
                params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"],
                                        stop_token_ids=request["stop_token_ids"], stop=stop,
                                        repetition_penalty=request.get("repetition_penalty", 1.0),
                                        detokenize=stop is not None)
                outputs = llm.generate([{"prompt_token_ids": ids} for ids in request["prompts"]], params,
                                       use_tqdm=False)
                answer(ok=True, outputs=[list(out.outputs[0].token_ids) for out in outputs])
            else:
                answer(ok=False, error=f"unknown op {op!r}")
        except Exception as e:  # noqa: BLE001 - the grader decides what a failure means
            answer(ok=False, error=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
