"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, a typed error for what failed (never read from the words of the reply).
Every call is streamed, so a call that is producing tokens can be told from a stuck one, and giving
up closes the connection, which is what makes a server stop generating; every call is bounded in
time and in bytes. The stream, its bounds and what each error means: docs/model-clients.md.
"""

from resources.model_clients.ollama import OllamaChatClient
from resources.model_clients.openai import OpenAIChatClient
from resources.model_clients.streams import MIN_REPLY_BYTES, REPLY_BYTES_PER_TOKEN, reply_byte_cap

__all__ = ["MIN_REPLY_BYTES", "REPLY_BYTES_PER_TOKEN", "OllamaChatClient", "OpenAIChatClient", "reply_byte_cap"]
