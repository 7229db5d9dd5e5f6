"""Tool-calling chat templates written here, modelled on the public ones (Llama 3.1 JSON tools, Mistral
v0.3, DeepSeek-V3, Qwen2.5, Hermes 2 Pro) and one of our own, each with its references built in.

Each template is written once with four placeholders: ``@GEN@ ... @/GEN@`` around what the model writes
in an assistant turn (its text, its tool calls, its reasoning where kept, the token that ends the turn:
everything after the generation prompt) and ``@TOOL@ ... @/TOOL@`` around each tool result's block.
:func:`plain` drops them (the template as a model ships it); :func:`marked` turns the first pair into
``{% generation %}`` markers (the reference for ``mask_prompt: true``: transformers'
``return_assistant_tokens_mask``), :func:`tools_marked` the second (the reference for what ``mask_prompt:
false`` must leave out). Markers render nothing, so the three render the same text (tested).
"""

from __future__ import annotations

from functools import cache

GEN, END = "{% generation %}", "{% endgeneration %}"

LLAMA31 = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message + '<|eot_id|>' }}"
    "{%- if tools is not none %}"
    "{%- set first_user_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}"
    "{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments. ' }}"
    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.\\n\\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) + '\\n\\n' }}{%- endfor %}"
    "{{- first_user_message + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and 'tool_calls' not in message %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}@GEN@{{- message['content'] | trim + '<|eot_id|>' }}@/GEN@"
    "{%- elif not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- elif 'tool_calls' in message %}"
    "{%- if message.tool_calls | length != 1 %}{{- raise_exception('This model only supports single tool-calls at once!') }}"
    "{%- endif %}"
    "{%- set tool_call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}@GEN@"
    "{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' + tool_call.arguments | tojson + '}' }}"
    "{{- '<|eot_id|>' }}@/GEN@"
    "{%- else %}@TOOL@"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + {'output': message.content} | tojson + '<|eot_id|>' }}"
    "@/TOOL@{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
"""Tools in the first user message, one call a turn as JSON with ``parameters``, results in ``ipython``
turns, every turn closed by ``<|eot_id|>``; a tool call has no content."""

MISTRAL_V03 = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}"
    "{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if tools is not none and (message == user_messages[-1]) %}"
    "{{- '[AVAILABLE_TOOLS] [' }}"
    "{%- for tool in tools %}{{- '{\"type\": \"function\", \"function\": ' + tool.function | tojson + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- '][/AVAILABLE_TOOLS]' }}"
    "{%- endif %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
    "{%- elif message.tool_calls is defined and message.tool_calls is not none %}@GEN@"
    "{{- '[TOOL_CALLS] [' }}"
    "{%- for tool_call in message.tool_calls %}"
    "{{- '{\"name\": \"' + tool_call.function.name + '\", \"arguments\": ' + tool_call.function.arguments | tojson }}"
    "{{- ', \"id\": \"' + tool_call.id + '\"}' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}"
    "{{- ']' + eos_token }}@/GEN@"
    "{%- elif message['role'] == 'assistant' %}@GEN@{{- ' ' + message['content'] | trim + eos_token }}@/GEN@"
    "{%- elif message['role'] == 'tool' %}@TOOL@"
    "{{- '[TOOL_RESULTS] {\"content\": ' + message.content | tojson + ', \"call_id\": \"' + message.tool_call_id + '\"}' }}"
    "{{- '[/TOOL_RESULTS]' }}@/TOOL@"
    "{%- else %}{{- raise_exception('Only user and assistant roles are supported, with the exception of an "
    "initial optional system message!') }}"
    "{%- endif %}"
    "{%- endfor %}"
)
"""Tools before the *last* user message and the system message inside it (so a conversation that ends
with the assistant shows it nowhere, and a cut after an earlier turn renders it elsewhere: not
prefix-stable), no generation prompt, calls after ``[TOOL_CALLS]`` closed by ``</s>``."""

DEEPSEEK_V3 = (
    "{%- set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{%- if ns.is_first_sp %}{%- set ns.system_prompt = ns.system_prompt + message['content'] %}"
    "{%- set ns.is_first_sp = false %}"
    "{%- else %}{%- set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{{- bos_token }}{{- ns.system_prompt }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false %}{{- '<｜User｜>' + message['content'] }}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false %}"
    "{%- if not ns.is_first %}{{- '<｜Assistant｜>' }}{%- endif %}@GEN@"
    "{%- for tool in message['tool_calls'] %}"
    "{%- if not ns.is_first %}"
    "{%- if message['content'] is none %}{{- '<｜tool▁calls▁begin｜>' }}"
    "{%- else %}{{- message['content'] + '<｜tool▁calls▁begin｜>' }}{%- endif %}"
    "{{- '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json\\n' }}"
    "{{- tool['function']['arguments'] | tojson + '\\n```<｜tool▁call▁end｜>' }}"
    "{%- set ns.is_first = true %}"
    "{%- else %}"
    "{{- '\\n<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json\\n' }}"
    "{{- tool['function']['arguments'] | tojson + '\\n```<｜tool▁call▁end｜>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}@/GEN@"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}"
    "{%- if ns.is_tool %}@TOOL@{{- '<｜tool▁outputs▁end｜>' }}@/TOOL@"
    "@GEN@{{- message['content'] + '<｜end▁of▁sentence｜>' }}@/GEN@{%- set ns.is_tool = false %}"
    "{%- else %}{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<｜Assistant｜>' }}@GEN@{{- content + '<｜end▁of▁sentence｜>' }}@/GEN@"
    "{%- endif %}"
    "{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true %}@TOOL@"
    "{%- if ns.is_output_first %}"
    "{{- '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}"
    "{%- set ns.is_output_first = false %}"
    "{%- else %}{{- '\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}{%- endif %}"
    "@/TOOL@{%- endif %}"
    "{%- endfor %}"
    "{%- if ns.is_tool %}{{- '<｜tool▁outputs▁end｜>' }}{%- endif %}"
    "{%- if add_generation_prompt and not ns.is_tool %}{{- '<｜Assistant｜>' }}{%- endif %}"
)
"""Special tokens inside the call (the old rule stopped at ``<｜tool▁calls▁begin｜>``), the public
template's state that is never reset (a later call renders without its header, later results without
their opening) and the results' end written by the turn after them."""

QWEN25 = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}"
    "{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '"
    " + '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": '"
    " + '<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant' and not message.tool_calls) %}"
    "{%- if message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}@GEN@"
    "{{- message.content + '<|im_end|>' }}@/GEN@{{- '\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}@GEN@"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>' }}@/GEN@{{- '\\n' }}"
    "{%- elif message.role == 'tool' %}@TOOL@"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "@/TOOL@{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Calls in ``<tool_call>`` (ordinary added tokens, not special), results gathered in one user turn."""

HERMES = (
    "{{- bos_token }}"
    "{%- if tools %}{{- '<|im_start|>system\\nYou are a function calling AI model. You are provided with function "
    "signatures within <tools></tools> XML tags. Here are the available tools: <tools> ' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{%- if not loop.last %}{{- ' ' }}{%- endif %}{%- endfor %}"
    "{{- ' </tools>For each function call return a json object within <tool_call></tool_call> XML tags.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or message.role == 'system' "
    "or (message.role == 'assistant' and message.tool_calls is not defined) %}"
    "{%- if message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}@GEN@"
    "{{- message.content + '<|im_end|>' }}@/GEN@{{- '\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}@GEN@"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}{{- '<tool_call>\\n' }}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '{\"name\": \"' + tool_call.name + '\", \"arguments\": ' + tool_call.arguments | tojson + '}' }}"
    "{{- '\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>' }}@/GEN@{{- '\\n' }}"
    "{%- elif message.role == 'tool' %}@TOOL@"
    "{%- if loop.previtem and loop.previtem.role != 'tool' %}{{- '<|im_start|>tool\\n' }}{%- endif %}"
    "{{- '<tool_response>\\n' + message.content }}"
    "{%- if not loop.last %}{{- '\\n</tool_response>\\n' }}{%- else %}{{- '\\n</tool_response>' }}{%- endif %}"
    "{%- if not loop.last and loop.nextitem.role != 'tool' %}{{- '<|im_end|>' }}"
    "{%- elif loop.last %}{{- '<|im_end|>' }}{%- endif %}"
    "@/TOOL@{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""The content of a turn with calls is not shown; a tool result closes differently when it is last."""

OWN = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|role|>assistant\\n' }}@GEN@"
    "{%- if message.reasoning_content %}{{- '<|think|>' + message.reasoning_content + '<|/think|>' }}{%- endif %}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- if message.tool_calls %}"
    "{%- for call in message.tool_calls %}"
    "{{- '<|call|>' + call.function.name + '(' + call.function.arguments | tojson + ')' }}"
    "{%- endfor %}"
    "{{- '<|call_end|>' }}"
    "{%- else %}{{- '<|end|>' }}{%- endif %}@/GEN@"
    "{{- '\\n' }}"
    "{%- elif message.role == 'tool' %}@TOOL@"
    "{{- '<|result|>' + message.content + '<|/result|>\\n' }}@/TOOL@"
    "{%- else %}"
    "{{- '<|role|>' + message.role + '\\n' }}"
    "{%- if message.role == 'system' and tools %}{{- 'Tools: ' + tools | map(attribute='function.name') | join(', ') + '\\n' }}"
    "{%- endif %}"
    "{{- message.content + '<|end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|role|>assistant\\n' }}{%- endif %}"
)
"""Our own: reasoning kept in every turn, several calls a turn, a turn with calls closed by another token
(``<|call_end|>``) than a turn of text (``<|end|>``), results without a header."""

TEMPLATES = {"llama3.1": LLAMA31, "mistral-v0.3": MISTRAL_V03, "deepseek-v3": DEEPSEEK_V3, "qwen2.5": QWEN25,
             "hermes": HERMES, "own": OWN}
TOKENS = {  # (bos, eos) of each family's tokenizer
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"), "mistral-v0.3": ("<s>", "</s>"),
    "deepseek-v3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"), "qwen2.5": (None, "<|im_end|>"),
    "hermes": ("<s>", "<|im_end|>"), "own": (None, "<|end|>"),
}
SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>", "[INST]",
            "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
            "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|role|>", "<|think|>", "<|/think|>",
            "<|call|>", "<|call_end|>", "<|end|>", "<|result|>", "<|/result|>"]
ORDINARY = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
"""Added tokens that are not special (as Qwen2.5 has them)."""
CORPUS = ["What is the weather in Paris? It is 21 degrees in Paris. And in Rome? Let me check. 18 in Rome.",
          'get_weather {"city": "Paris"} {"temp": 21} function name arguments parameters output content call_id',
          "You answer with tools. Be brief. Cutting Knowledge Date Today Environment ipython json"]


def plain(template: str) -> str:
    """The template as a model ships it."""
    return _cut(template, "@GEN@", "@/GEN@", "", "")


def marked(template: str) -> str:
    """``{% generation %}`` around what the model writes in each assistant turn."""
    return _cut(template, "@GEN@", "@/GEN@", GEN, END)


def tools_marked(template: str) -> str:
    """``{% generation %}`` around each tool result's block."""
    return _cut(template, "@TOOL@", "@/TOOL@", GEN, END)


def _cut(template: str, opening: str, closing: str, new_opening: str, new_closing: str) -> str:
    out = template.replace(opening, new_opening).replace(closing, new_closing)
    for other in ("@GEN@", "@/GEN@", "@TOOL@", "@/TOOL@"):
        out = out.replace(other, "")
    return out


@cache
def _trained():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_tokens(ORDINARY)
    return tok.to_str()


def tool_tokenizer(family: str):
    """A byte-level BPE tokenizer with every family's special tokens, ``family``'s bos and eos, and its
    template (the shipped form)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    bos, eos = TOKENS[family]
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_trained()), bos_token=bos, eos_token=eos,
                                   pad_token="<|endoftext|>")
    fast.chat_template = plain(TEMPLATES[family])
    return fast


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def call(name: str, city: str, ident: str) -> dict:
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": {"city": city}}}


CONVERSATION = [
    {"role": "system", "content": "You answer with tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call("get_weather", "Paris", "call00001")]},
    {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call00001"},
    {"role": "assistant", "content": "It is 21 degrees in Paris."},
    {"role": "user", "content": "And in Rome?"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [call("get_weather", "Rome", "call00002")]},
    {"role": "tool", "content": '{"temp": 18}', "tool_call_id": "call00002"},
    {"role": "assistant", "content": "18 in Rome."},
]
"""A call without content, a result, an answer; then a call with content, a result, an answer."""

PARALLEL = [
    {"role": "user", "content": "What is the weather in Paris and in Rome?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two cities: two calls.",
     "tool_calls": [call("get_weather", "Paris", "call00001"), call("get_weather", "Rome", "call00002")]},
    {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call00001"},
    {"role": "tool", "content": '{"temp": 18}', "tool_call_id": "call00002"},
    {"role": "assistant", "content": "21 in Paris, 18 in Rome.", "reasoning_content": "Both came back."},
]
"""Two calls in one turn, two results in a row, reasoning kept where the template shows it."""
