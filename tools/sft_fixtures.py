#!/usr/bin/env python3
"""Writes anvil's chat-template fixtures (tests/data/sft_fixtures/chat_templates.expected.json).

Run with the Python that has `transformers` and `jinja2` (the pyenv python3 on PATH; never in CI):

    python3 tools/sft_fixtures.py

The reference ids come from Hugging Face `transformers`: apply_chat_template(conversation,
tokenize=True, add_generation_prompt=...) with the real chat templates of Llama 3 Instruct
(meta-llama/Meta-Llama-3-8B-Instruct), Qwen2 Instruct (Qwen/Qwen2-7B-Instruct) and Llama 2 chat
(meta-llama/Llama-2-7b-chat-hf), copied below from their tokenizer_config.json files. The
tokenizers are the small committed fixtures of tests/tokenizer/fixtures/ (tools/
tokenizer_fixtures.py makes them), which carry the same special tokens as the real models:
  llama3_like   byte-level BPE, <|begin_of_text|> ... <|eot_id|>       -> template llama3
  qwen2_like    byte-level BPE, <|im_start|> <|im_end|> <|endoftext|>  -> template chatml
  sp_like       SentencePiece-style, Prepend normalizer, <s> </s>      -> template llama2
  sp_metaspace  the same model behind Metaspace(prepend_scheme=first)  -> template llama2
No conversation here spells a special token inside its content: anvil encodes such content as
text (docs/formats.md), while transformers would emit the special token.
"""
import json
import os

from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZERS = os.path.join(ROOT, "tests", "tokenizer", "fixtures")
OUT = os.path.join(ROOT, "tests", "data", "sft_fixtures", "chat_templates.expected.json")

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")

# (fixture tokenizer, anvil template name, HF template, bos, eos)
SETUPS = [
    ("llama3_like", "llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|end_of_text|>"),
    ("qwen2_like", "chatml", QWEN2_TEMPLATE, None, "<|endoftext|>"),
    ("sp_like", "llama2", LLAMA2_TEMPLATE, "<s>", "</s>"),
    ("sp_metaspace", "llama2", LLAMA2_TEMPLATE, "<s>", "</s>"),
]


def msg(role, content):
    return {"role": role, "content": content}


# (name, messages, add_generation_prompt); every conversation alternates user/assistant after
# an optional system message, so the Llama 2 template accepts all of them.
CONVERSATIONS = [
    ("single_turn", [msg("user", "What is the capital of France?"),
                     msg("assistant", "The capital of France is Paris.")], False),
    ("with_system", [msg("system", "You are a terse assistant."),
                     msg("user", "Name three primes."),
                     msg("assistant", "2, 3 and 5.")], False),
    ("multi_turn", [msg("system", "Answer in one sentence."),
                    msg("user", "Why is the sky blue?"),
                    msg("assistant", "Air scatters blue light more than red light."),
                    msg("user", "And at sunset?"),
                    msg("assistant", "Light crosses more air, so the blue is scattered away.")],
     False),
    ("unicode", [msg("user", "Grüße aus Köln! Was heißt 猫 auf Deutsch? 🙂"),
                 msg("assistant", "「猫」 heißt auf Deutsch „Katze“ — très simple. 🐈")],
     False),
    ("whitespace", [msg("user", "  Make a list:\n\n"),
                    msg("assistant", "\nSure:\n- one\n- two  \n")], False),
    ("code_and_digits", [msg("user", "Compute 12+30 in Python."),
                         msg("assistant", "print(12 + 30)  # 42\n\n```\n42\n```")], False),
    ("generation_prompt", [msg("system", "Be kind."),
                           msg("user", "Say hello in French.")], True),
    ("generation_prompt_multi", [msg("user", "Hi!"), msg("assistant", "Hello! How can I help?"),
                                 msg("user", "Tell me a joke.")], True),
]


def as_ids(result):
    """apply_chat_template returns a list of ids, or a BatchEncoding in newer versions."""
    if isinstance(result, list):
        return [int(i) for i in result]
    return [int(i) for i in result["input_ids"]]


def main():
    cases = []
    for name, template_name, template, bos, eos in SETUPS:
        path = os.path.join(TOKENIZERS, f"{name}.tokenizer.json")
        kwargs = {"eos_token": eos}
        if bos is not None:
            kwargs["bos_token"] = bos
        tok = PreTrainedTokenizerFast(tokenizer_file=path, **kwargs)
        tok.chat_template = template
        for conv_name, messages, generation_prompt in CONVERSATIONS:
            text = tok.apply_chat_template(messages, tokenize=False,
                                           add_generation_prompt=generation_prompt)
            ids = as_ids(tok.apply_chat_template(messages, tokenize=True,
                                                 add_generation_prompt=generation_prompt))
            cases.append({"tokenizer": f"tokenizer/fixtures/{name}.tokenizer.json",
                          "template": template_name, "name": conv_name,
                          "add_generation_prompt": generation_prompt, "messages": messages,
                          "text": text, "ids": ids})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/sft_fixtures.py", "cases": cases}, f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
