"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, typed errors for timeout, context overflow, an overrun reply and provider
failure.

Every call is streamed (Ollama: `stream: true`, newline-delimited JSON ending in a `done: true`
line; OpenAI: `stream: true` with `stream_options.include_usage`, server-sent events ending in
`data: [DONE]`), so a call that is producing tokens can be told from a stuck one, and giving up
closes the connection, which is what makes a server stop generating. A server that refuses to
stream (a whole JSON reply to a stream request, or a 4xx that names `stream`) is answered as it
answers, and called without streaming from then on (`streaming` turns False). A stream with no
usage chunk (llama-cpp-python's server ignores include_usage) has its answer counted in pieces and
its prompt by the server's tokenizer.

Every call is bounded: a wall-clock ceiling (`timeout_s`, however slowly the server sends), a
stall window (`stall_s`: no piece of text for that long, the wait for the first one included, is
`ModelStalled`; a chunk without text is no progress), the bytes held (the reply text, or a whole
body, from the output token cap; one event or line of a stream, `StreamBounds.event_max_bytes`),
the bytes read (`StreamBounds.call_max_bytes`), the pieces streamed (past the output cap with a
margin: `RunawayReply`), and a validated reply shape, chunk by chunk. Both windows are kept by
one watchdog thread that shuts the call's sockets down, which ends a read blocked in the kernel at
once.

What failed decides the error type, never the words of the model's reply:
- no answer by the ceiling: `ModelTimeout` (`progressing` when pieces were still arriving); no
  piece for the stall window: `ModelStalled`;
- an HTTP error whose server error says the prompt is over the context: `ContextOverflow`. For the
  OpenAI protocol that is the error's `code` ("context_length_exceeded": OpenAI, llama-cpp-python)
  or `type` ("exceed_context_size_error": llama.cpp's server) on any status, or a 400/413 whose
  error message names the context (vLLM sends only a message). Ollama has no error codes: its
  `error` string names the context ("the input length exceeds the context length"), and has come
  as 400, 413 or 500 by version and endpoint, so there the message decides on any error status.
  Both read the server's error object of an error status (or an error chunk inside a stream)
  only, never the reply text;
- a reply over the byte cap: `OutputLimitExceeded`; a stream past its output cap: `RunawayReply`;
- a connection refused, or closed before the reply's end: `HostUnreachable`; a 200 that breaks
  the wire protocol (a bad chunk mid-stream, an event over its bound, a call over its bytes
  included): `MalformedReply`; anything else the server did wrong: `ProviderError` (an error chunk
  inside a 200 stream with its `code` as status, else 500: the host's failure).
"""

from resources.model_clients.ollama import OllamaChatClient
from resources.model_clients.openai import OpenAIChatClient
from resources.model_clients.streams import MIN_REPLY_BYTES, REPLY_BYTES_PER_TOKEN, reply_byte_cap

__all__ = ["MIN_REPLY_BYTES", "REPLY_BYTES_PER_TOKEN", "OllamaChatClient", "OpenAIChatClient", "reply_byte_cap"]
