// The SFT data API in one include: chat templates and loss masks (chat_template.h), JSONL
// chat/alpaca records (sft_records.h) and `anvil prepare --sft` (sft_prepare.h). The
// finetune command and chat-mode generation use only what these headers declare.
#pragma once

#include "data/chat_template.h"
#include "data/sft_prepare.h"
#include "data/sft_records.h"
