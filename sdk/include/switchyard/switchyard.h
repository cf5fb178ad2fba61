/*
 * Switchyard embedding API: the engine inside your own program or server.
 *
 * C only (C99), like plugin.h: no C++ type or exception crosses it, and it
 * depends on no other header of the project. Link libswitchyard (installed
 * with the SDK).
 *
 *   sy_engine_options o = {sizeof o};
 *   o.manifest = "stories.yaml"; o.profile = "paged";
 *   sy_engine* e;
 *   if (sy_engine_create(&o, &e) != SY_API_OK) { fprintf(stderr, "%s\n", sy_last_error()); ... }
 *   sy_request_params p = {sizeof p};
 *   p.prompt_text = "Once upon a time"; p.max_tokens = 64;
 *   sy_request* r;
 *   sy_submit(e, &p, &r);
 *   sy_request_wait(r);
 *   printf("%s\n", sy_request_text(r));
 *   sy_request_release(r);
 *   sy_engine_destroy(e);
 *
 * Threads: every function is thread-safe unless its comment says
 * otherwise. Callbacks run on the engine's thread; they must be quick and
 * must not call sy_engine_destroy or sy_request_release.
 * Errors: functions that can fail return SY_API_OK (0) or an SY_API_* code
 * saying what kind of failure it was; the message (naming the file, field,
 * plugin or value) is sy_last_error() on the calling thread, valid until the
 * next failing call on that thread.
 * Ownership: the caller owns what it passes in (copied before the call
 * returns, except callbacks and `user`, kept for the request's life).
 * Strings returned by the API stay valid until the object they came from is
 * destroyed or released, unless the comment says otherwise.
 * Versions: every struct starts with struct_size, which the caller sets to
 * sizeof the struct as its header declares it; structs only grow at the end
 * (marked ---- 1.x ----). The library reads only the fields a caller's
 * struct_size covers (later fields count as zero, which is always "off"),
 * and writes only the fields an output struct's struct_size covers. A
 * program built against 1.0 runs against any 1.x library.
 */
#ifndef SWITCHYARD_SWITCHYARD_H_
#define SWITCHYARD_SWITCHYARD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SY_API_VERSION_MAJOR 1
#define SY_API_VERSION_MINOR 8

#if defined(_WIN32)
#define SY_API __declspec(dllimport)
#else
#define SY_API __attribute__((visibility("default")))
#endif

typedef int32_t sy_api_status;
enum {
  SY_API_OK = 0,
  SY_API_ERROR = 1,            /* anything not below (an internal error) */
  SY_API_INVALID_ARGUMENT = 2, /* bad input: a malformed manifest or model, an empty prompt, bad sampling values, ... */
  SY_API_NOT_FOUND = 3,        /* a file, profile, component or tokenizer that does not exist */
  SY_API_SHUTTING_DOWN = 4,    /* the engine is being destroyed */
  /* ---- 1.2 ---- */
  SY_API_UNSUPPORTED = 5,      /* valid input this build or model cannot handle (an op without a kernel, a layer that cannot fuse) */
  SY_API_OUT_OF_MEMORY = 6,    /* an allocation failed, or the request can never fit the KV cache */
  SY_API_PLUGIN_FAILURE = 7,   /* a plugin returned an error or broke its contract (the message names it) */
  SY_API_CANCELLED = 8         /* the operation was cancelled */
};

typedef struct sy_engine sy_engine;
typedef struct sy_request sy_request;

/* The message of the last failed call on this thread ("" if none). */
SY_API const char* sy_last_error(void);

typedef struct sy_engine_options {
  uint32_t struct_size;
  const char* manifest;  /* YAML manifest (required before 1.5; 1.5: NULL is the default manifest installed
                            beside the library, share/switchyard/default.yaml, which serves any model) */
  const char* profile;   /* NULL: the top level */
  const char* model;     /* NULL: the manifest's */
  int32_t threads;       /* 0: the manifest's, else one per core */
  /* ---- 1.1 ---- */
  const char* tokenizer; /* NULL: the manifest's, else the one in the model folder */
  /* ---- 1.3 ---- */
  const char* chat_template; /* for sy_chat_render: a .jinja file, or a .json with "chat_template"; NULL: the
                                template of the tokenizer's folder, else the model's (none: no template) */
  /* ---- 1.6 ---- */
  const char* tool_parser;   /* how the model writes tool calls (sy_engine_tool_parser's names); NULL: the
                                family of its chat template */
} sy_engine_options;

/* Loads the model and plugins of a manifest profile. The profile must select
 * a cache manager (the asynchronous step engine serves requests). 1.5:
 * options->manifest may be NULL (then options->model is required). */
SY_API sy_api_status sy_engine_create(const sy_engine_options* options, sy_engine** out);
/* Cancels what is still running, waits for the engine thread, frees all.
 * NULL is a no-op. No other call on this engine or its requests may run
 * concurrently or follow (release every request handle first or never use
 * it again). */
SY_API void sy_engine_destroy(sy_engine* engine);

/* Model facts. Strings are owned by the engine, valid until it is
 * destroyed; NULL engine gives "" or 0. */
SY_API const char* sy_engine_model_name(const sy_engine* engine);
SY_API int32_t sy_engine_max_context(const sy_engine* engine);
SY_API int32_t sy_engine_has_tokenizer(const sy_engine* engine);
/* 1.1: the ONNX file the engine runs (its folder holds the tokenizer and
 * chat template of a Hugging Face model folder) and the tokenizer file ("" if none). */
SY_API const char* sy_engine_model_path(const sy_engine* engine);
SY_API const char* sy_engine_tokenizer_path(const sy_engine* engine);
/* 1.1: the bytes one token decodes to on its own (special tokens included;
 * byte-level pieces may be part of a UTF-8 character). Writes up to
 * capacity bytes and sets *length to the full length. */
SY_API sy_api_status sy_token_text(const sy_engine* engine, int32_t token, char* text, int32_t capacity, int32_t* length);

/* 1.3: chat templates (Hugging Face's Jinja templates, rendered as
 * transformers renders them). The name of the engine's template ("" when it
 * has none). */
SY_API const char* sy_engine_chat_template_name(const sy_engine* engine);
/* 1.3: renders a conversation with the engine's chat template. request_json
 * is a JSON object: "messages" (required, OpenAI's shape), and optionally
 * "tools", "documents", "add_generation_prompt" (default true),
 * "continue_final_message" (default false), "chat_template_kwargs" (an
 * object); any other key is refused, naming it. Writes up to capacity bytes of the prompt text and sets *length
 * to its full length (call again with a larger buffer when *length >
 * capacity). SY_API_UNSUPPORTED when the engine has no template,
 * SY_API_INVALID_ARGUMENT for malformed JSON or a conversation the template
 * refuses (the message is the template's). */
SY_API sy_api_status sy_chat_render(const sy_engine* engine, const char* request_json, char* text, int64_t capacity,
                                    int64_t* length);
/* 1.3: the sampling defaults the model folder recommends
 * (generation_config.json, genai_config.json's search) as a JSON object with
 * the fields it sets among "temperature", "top_p", "top_k", "min_p",
 * "repetition_penalty", and "source" (the file); "{}" when there are none. */
SY_API const char* sy_engine_sampling_defaults(const sy_engine* engine);

/* Text <-> token ids with the manifest's tokenizer. tokenize writes up to
 * capacity ids and sets *count to the full length (call again with a
 * larger buffer when *count > capacity). */
SY_API sy_api_status sy_tokenize(const sy_engine* engine, const char* text, int32_t add_bos, int32_t* ids, int32_t capacity,
                          int32_t* count);

/* The 1.0 sampling parameters, embedded by value in sy_request_params and
 * therefore frozen (it can never grow): new programs use the growable
 * sy_sampling_params through sy_request_params.sampling_params. */
typedef struct sy_sampling {
  uint32_t struct_size;
  float temperature; /* 0: greedy */
  int32_t top_k;     /* 0: off */
  float top_p;       /* 1: off; 0 means 1 */
  uint64_t seed;
} sy_sampling;

/* 1.2: every sampling parameter in one struct passed by pointer, so it can
 * grow. Zero is "off" (or the default) for every field. */
typedef struct sy_sampling_params {
  uint32_t struct_size;
  float temperature;        /* 0: greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 0 or 1: off */
  float min_p;              /* [0, 1]: drop tokens below min_p * the top probability */
  float presence_penalty;   /* OpenAI's, on generated tokens: [-2, 2] */
  float frequency_penalty;  /* OpenAI's, on generated tokens: [-2, 2] */
  float repetition_penalty; /* Hugging Face's, on prompt and generated tokens: > 0 (0 and 1: off) */
  uint64_t seed;
  /* ---- 1.6 ---- */
  /* OpenAI's logit_bias: bias values[i] added to token ids[i]'s logit
   * before sampling (not to the reported logprobs); each in [-100, 100]. */
  const int32_t* logit_bias_ids;
  const float* logit_bias_values;
  int32_t num_logit_bias;
} sy_sampling_params;

enum {
  SY_FINISH_NONE = 0, /* still running */
  SY_FINISH_STOP,     /* end-of-sequence token or a stop string */
  SY_FINISH_LENGTH,   /* max_tokens */
  SY_FINISH_CONTEXT,  /* the context limit */
  SY_FINISH_CANCELLED,
  SY_FINISH_TIMEOUT,
  SY_FINISH_ERROR
};

typedef struct sy_request_info {
  uint32_t struct_size;
  int32_t finish_reason;  /* SY_FINISH_* */
  int32_t prompt_tokens;
  int32_t completion_tokens;
  int32_t cached_tokens;  /* prompt tokens reused from the prefix cache */
  double ttft_ms;
  double e2e_ms;
  const char* error;      /* for SY_FINISH_ERROR */
  /* ---- 1.6 ---- */
  /* Text released only at the end, which no on_token call carried: an
   * incomplete UTF-8 character, or the start of a stop string that never
   * completed. A streaming caller sends it last; "" when there is none.
   * sy_request_text already includes it. */
  const char* final_text;
  double queue_ms;        /* arrival -> first admitted into a step (prefill: ttft_ms - queue_ms) */
} sy_request_info;

/* A generated token's log-probability under the model (log-softmax of its
 * logits, before penalties and temperature) and the most likely tokens. */
typedef struct sy_token_logprobs {
  uint32_t struct_size;
  int32_t token;
  float logprob;
  int32_t num_top;
  const int32_t* top_tokens;  /* most likely first */
  const float* top_logprobs;
} sy_token_logprobs;

typedef struct sy_request_params {
  uint32_t struct_size;
  const char* prompt_text;    /* tokenized with BOS, or ... */
  const int32_t* prompt_ids;  /* ... these ids as they are (used when prompt_text is NULL) */
  int32_t num_prompt_ids;
  int32_t max_tokens;         /* 0: 16 */
  sy_sampling sampling;
  int32_t ignore_eos;
  const char* const* stop;    /* stop strings: generation ends before the first one appears */
  int32_t num_stop;
  int32_t priority;
  double timeout_ms;          /* 0: none */
  /* Streaming, from the engine thread: each token with its text (the text
   * may be empty while a UTF-8 character or a possible stop string is
   * incomplete; it is then delivered with a later token). */
  void (*on_token)(void* user, int32_t token, const char* text);
  /* Called once at the end, from the engine thread. */
  void (*on_finish)(void* user, const sy_request_info* info);
  void* user;
  /* ---- 1.1 (read when struct_size covers them; zero means off) ---- */
  float presence_penalty;   /* OpenAI's, on generated tokens: [-2, 2] */
  float frequency_penalty;  /* OpenAI's, on generated tokens: [-2, 2] */
  float repetition_penalty; /* Hugging Face's, on prompt and generated tokens: > 0 (0 and 1: off) */
  float min_p;              /* [0, 1]: drop tokens below min_p * the top probability */
  int32_t logprobs;         /* 1: report each token's log-probability (on_logprobs) */
  int32_t top_logprobs;     /* with logprobs: also the k most likely tokens, k <= 20 */
  const int32_t* stop_ids;  /* token ids that end generation (as end-of-sequence does, even with ignore_eos) */
  int32_t num_stop_ids;
  /* With logprobs: called for each token just before on_token, from the
   * engine thread. Pointers are valid during the call. */
  void (*on_logprobs)(void* user, const struct sy_token_logprobs* logprobs);
  /* ---- 1.2 ---- */
  /* When set, replaces `sampling` and the 1.1 penalty and min_p fields
   * above, which must then be zero (SY_API_INVALID_ARGUMENT naming the
   * field otherwise). Copied by sy_submit. */
  const sy_sampling_params* sampling_params;
  /* ---- 1.4 ---- */
  /* Structured output (needs a logits processor in the engine's profile):
   * constraint_kind "json_object", "json_schema" (constraint_spec: the
   * schema as JSON text), "regex", "grammar" (EBNF/GBNF) or a kind of the
   * processor's own; NULL: none. A spec the processor refuses fails
   * sy_submit with SY_API_INVALID_ARGUMENT and its message. */
  const char* constraint_kind;
  const char* constraint_spec;
} sy_request_params;

/* Queues a request. params and everything it points to are copied before
 * the call returns, except on_token, on_logprobs, on_finish and user, kept
 * until on_finish has run. The handle stays valid until sy_request_release
 * (release exactly once). Errors: SY_API_INVALID_ARGUMENT for a bad
 * request (named in sy_last_error: empty or too long a prompt, bad
 * sampling values, a full queue). */
SY_API sy_api_status sy_submit(sy_engine* engine, const sy_request_params* params, sy_request** out);
/* Non-blocking: copies up to capacity new token ids since the last poll and
 * returns 1 once the request has finished and every token was polled, else 0. */
SY_API int32_t sy_request_poll(sy_request* request, int32_t* tokens, int32_t capacity, int32_t* count);
/* Blocks until the request finishes. */
SY_API void sy_request_wait(sy_request* request);
/* Ends the request early (finish reason CANCELLED); safe after it finished. */
SY_API void sy_request_cancel(sy_request* request);
/* 1.2: copies the generated text so far (stop strings trimmed) into text:
 * up to capacity bytes, NUL-terminated when it fits (length < capacity),
 * and sets *length to the full length in bytes. Safe from any thread while
 * the engine generates. */
SY_API sy_api_status sy_request_copy_text(sy_request* request, char* text, int32_t capacity, int32_t* length);
/* The generated text so far, as a snapshot owned by the handle: valid until
 * the next sy_request_text call on the same request or its release. Not for
 * concurrent calls on one request (use sy_request_copy_text). */
SY_API const char* sy_request_text(sy_request* request);
/* Fills the fields out->struct_size covers (set it first). out->error is
 * valid until the request is released. Returns SY_API_INVALID_ARGUMENT for
 * a NULL request or out or a struct_size smaller than the 1.0 struct (1.1
 * and older declared this function void; callers that ignore the result
 * are unaffected). */
SY_API sy_api_status sy_request_info_get(sy_request* request, sy_request_info* out);
/* Cancels the request if it still runs and frees the handle. */
SY_API void sy_request_release(sy_request* request);

typedef struct sy_metrics {
  uint32_t struct_size;
  int32_t running;
  int32_t waiting;
  int64_t finished;
  int64_t cancelled;
  int64_t failed;
  int64_t prompt_tokens;
  int64_t generated_tokens;
  int64_t cached_tokens;
  int64_t preemptions;
  int64_t steps;
  int32_t kv_blocks_total;
  int32_t kv_blocks_used;
  int64_t spec_drafts;          /* speculative steps (a drafter is selected) */
  int64_t spec_draft_tokens;    /* tokens proposed */
  int64_t spec_accepted_tokens; /* tokens accepted */
  /* ---- 1.4 ---- structured output */
  int64_t constrained_requests;   /* requests that carried a constraint */
  int64_t constraint_refusals;    /* of those, refused by the logits processor */
  double constraint_compile_ms;   /* total time compiling (or finding cached) grammars */
  double constraint_mask_ms;      /* total time filling token masks */
  int64_t constraint_mask_rows;   /* masks filled */
} sy_metrics;

/* Fills the fields out->struct_size covers (set it first). */
SY_API sy_api_status sy_engine_metrics(const sy_engine* engine, sy_metrics* out);

/* ---- 1.5 ------------------------------------------------------------ */

/* The default manifest's path (beside the library: ../share/switchyard/
 * default.yaml from libswitchyard's folder); "" when it is not there. */
SY_API const char* sy_default_manifest(void);

/* The model's vocabulary size (the logits' width); 0 when not static. */
SY_API int32_t sy_engine_vocab_size(const sy_engine* engine);

/* Logits at every position of ids in one forward pass (teacher forcing, no
 * prefix cache), as [num_ids, vocab] floats, row-major, into out (capacity
 * floats, at least num_ids * vocab). Serialised with the engine's steps. */
SY_API sy_api_status sy_logits(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity);

/* Tokenizers without an engine: a router or an ingress that only needs to
 * turn text and conversations into token ids. path: a tokenizer file
 * (tokenizer.json, tokenizer.model, a llama2.c .bin) or a model folder;
 * chat_template: as sy_engine_options.chat_template (NULL: the folder's). */
typedef struct sy_tokenizer sy_tokenizer;
SY_API sy_api_status sy_tokenizer_open(const char* path, const char* chat_template, sy_tokenizer** out);
SY_API void sy_tokenizer_close(sy_tokenizer* tokenizer);
/* The engine's own tokenizer (NULL when it has none), owned by the engine. */
SY_API const sy_tokenizer* sy_engine_tokenizer(const sy_engine* engine);
SY_API int32_t sy_tokenizer_vocab_size(const sy_tokenizer* tokenizer);
/* As sy_tokenize. */
SY_API sy_api_status sy_tokenizer_encode(const sy_tokenizer* tokenizer, const char* text, int32_t add_bos, int32_t* ids,
                                         int32_t capacity, int32_t* count);
/* The text of ids (skip_special: leave control tokens out). Writes up to
 * capacity bytes and sets *length to the full length. */
SY_API sy_api_status sy_tokenizer_decode(const sy_tokenizer* tokenizer, const int32_t* ids, int32_t num_ids, int32_t skip_special,
                                         char* text, int64_t capacity, int64_t* length);
/* As sy_chat_render, with this tokenizer's chat template. */
SY_API sy_api_status sy_tokenizer_chat_render(const sy_tokenizer* tokenizer, const char* request_json, char* text, int64_t capacity,
                                              int64_t* length);

/* Prefix-cache block hashes, for routers that send a request to the engine
 * holding the longest cached prefix of its prompt (KV-aware routing).
 * The KV cache is kept in blocks of sy_engine_kv_block_size tokens; block
 * i of a token sequence has the hash
 *   h_i = FNV-1a-64( le64(h_{i-1}) || le32(t) for each token t of block i ),  h_{-1} = 0,
 * (FNV-1a-64: offset basis 14695981039346656037, prime 1099511628211, over
 * bytes; le64/le32: little-endian bytes). Only full blocks have a hash.
 * sy_block_hashes writes up to capacity hashes and sets *count to
 * num_ids / block_size. Needs no engine. */
SY_API int32_t sy_engine_kv_block_size(const sy_engine* engine);
SY_API sy_api_status sy_block_hashes(int32_t block_size, const int32_t* ids, int32_t num_ids, uint64_t* hashes, int32_t capacity,
                                     int32_t* count);

/* KV-cache events: the blocks of the prefix cache that became findable
 * (STORED, with their tokens and parent's hash) or stopped being findable
 * (REMOVED), in order. A router that applies them knows which block hashes
 * each engine holds. Shaped after the KV events of vLLM, llm-d and NVIDIA
 * Dynamo (BlockStored / BlockRemoved / AllBlocksCleared) so an adapter to
 * their routers is a field mapping. Events need a cache manager that reports
 * them (the prefix-caching cache does). */
enum {
  SY_KV_BLOCK_STORED = 1,
  SY_KV_BLOCK_REMOVED = 2,
  SY_KV_ALL_CLEARED = 3,
  SY_KV_EVENTS_LOST = 4 /* the queue overflowed: events were dropped. Forget this engine's blocks and enable again */
};
typedef struct sy_kv_event {
  uint32_t struct_size;
  int32_t kind;           /* SY_KV_* */
  uint64_t sequence;      /* 1, 2, 3, ... (a gap means events were lost) */
  uint64_t block_hash;    /* STORED, REMOVED */
  uint64_t parent_hash;   /* STORED: the previous block's hash, 0 for a sequence's first block */
  const int32_t* tokens;  /* STORED: the block's tokens */
  int32_t num_tokens;
  int32_t device;         /* where the block lives: 0 host memory, 1 CUDA (the plugin ABI's SY_DEVICE_*) */
  double timestamp;       /* seconds since the Unix epoch */
} sy_kv_event;
/* capacity > 0: start queueing events (at most capacity wait; on overflow
 * the queue is replaced by one SY_KV_EVENTS_LOST), first a STORED event for
 * every block already cached, parents first. 0: stop and drop the queue.
 * SY_API_UNSUPPORTED when the cache manager reports no events. */
SY_API sy_api_status sy_kv_events_enable(sy_engine* engine, int32_t capacity);
/* Takes up to max queued events: *events points to *count pointers to
 * events owned by the engine, valid until the next sy_kv_events_poll on it
 * (one poller at a time). Each event is the library's sy_kv_event (its
 * struct_size says which fields it has). */
SY_API sy_api_status sy_kv_events_poll(sy_engine* engine, int32_t max, const sy_kv_event* const** events, int32_t* count);

/* KV transfer (prefill on one engine, decode on another). sy_kv_export
 * writes the KV of the longest cached prefix of ids (whole blocks; run the
 * prompt first, e.g. with max_tokens 1) in a versioned binary format (the
 * tokens, their block hashes, a checksum of each block's values, then the
 * keys and values of every layer; import checks both),
 * up to capacity bytes, and sets *size to its full size (call again with a
 * larger buffer when *size > capacity; zero blocks when nothing is cached).
 * sy_kv_import puts such an export into this engine's prefix cache: a
 * request whose prompt starts with those tokens then computes only the
 * rest. *cached_tokens: the tokens now cached. The two engines must run the
 * same model with the same KV block size and dtype (else
 * SY_API_INVALID_ARGUMENT naming both); SY_API_OUT_OF_MEMORY when the cache
 * has no room; SY_API_UNSUPPORTED (export and import) without a prefix
 * cache or with KV in device memory. */
SY_API sy_api_status sy_kv_export(sy_engine* engine, const int32_t* ids, int32_t num_ids, void* out, int64_t capacity, int64_t* size);
SY_API sy_api_status sy_kv_import(sy_engine* engine, const void* data, int64_t size, int32_t* cached_tokens);

/* ---- 1.6 ------------------------------------------------------------ */

/* The bytes a token adds to the text inside a sequence (the SentencePiece
 * space marker as a space, a byte-fallback token as its byte, byte-level
 * pieces as their raw bytes, possibly part of a UTF-8 character); a special
 * token as its vocabulary string. What logprobs report as a token's text
 * and "bytes". Writes up to capacity bytes and sets *length to the full length. */
SY_API sy_api_status sy_token_bytes(const sy_engine* engine, int32_t token, char* bytes, int32_t capacity, int32_t* length);

/* The tokenizer's facts as JSON (vLLM's /tokenizer_info): "bos_token",
 * "eos_token" (strings or null), "eos_token_ids", "chat_template" (its
 * source, or null), "chat_template_name", "model_max_length",
 * "vocab_size", "tokenizer_class". "{}" without a tokenizer. */
SY_API const char* sy_engine_tokenizer_info(const sy_engine* engine);

/* Prompt log-probabilities (an eval harness's loglikelihood): for each
 * position i in [1, num_ids), the log-probability of ids[i] after ids[0..i)
 * (teacher forcing, as sy_logits), written to logprobs[i-1]; ranks[i-1]
 * (optional): 1 + the number of tokens more likely; top_k in [0, 20] most
 * likely alternatives per position, most likely first, in
 * top_ids/top_logprobs[(i-1) * top_k + j] (optional when top_k is 0).
 * Every array holds num_ids - 1 (times top_k) entries. */
SY_API sy_api_status sy_prompt_logprobs(sy_engine* engine, const int32_t* ids, int32_t num_ids, int32_t top_k, float* logprobs,
                                        int32_t* ranks, int32_t* top_ids, float* top_logprobs);

/* Tool calls and reasoning. The family the engine reads tool calls in
 * ("hermes", "llama3_json", "mistral", "deepseek_v3", "granite",
 * "command_r", "gpt_oss"): options.tool_parser, else the family of its chat
 * template, else "hermes" (the convention a server offers tools in when a
 * template shows none). */
SY_API const char* sy_engine_tool_parser(const sy_engine* engine);
/* Reads a model's output, given as its token ids (special tokens count:
 * several families mark calls with them), into JSON:
 *   {"content": "...", "reasoning_content": "..." or null,
 *    "tool_calls": [{"name": "...", "arguments": "<JSON object text>"}]}
 * final 0: the output may still grow (streaming): content stops before
 * anything that is or may become a call, and only whole calls are listed;
 * (1.7) "partial_call": {"name", "arguments"} then gives the call being
 * written once its name is known, its arguments so far (a prefix of the
 * whole call's, which keep the text the model wrote).
 * Special tokens are left out of content. Writes up to capacity bytes and
 * sets *length to the full length. */
SY_API sy_api_status sy_parse_output(const sy_engine* engine, const int32_t* ids, int32_t num_ids, int32_t final, char* json,
                                     int64_t capacity, int64_t* length);
/* The same with a family named (NULL or "": the engine's), for output of a
 * template given with the request; and the family a template's source
 * writes tool calls in. sy_chat_render (1.6) also takes "chat_template" in
 * its request: the template's source, rendered with the model's special
 * tokens, in place of the engine's. */
SY_API sy_api_status sy_parse_output_as(const sy_engine* engine, const char* parser, const int32_t* ids, int32_t num_ids, int32_t final,
                                        char* json, int64_t capacity, int64_t* length);
SY_API const char* sy_tool_parser_for_template(const char* template_source);

/* ---- 1.7 ------------------------------------------------------------ */

/* Embeddings: one text's vector, its token ids in (sy_tokenize's). The final
 * hidden states (the LM head's input) pooled and normalised as the model's
 * files say: sentence-transformers' modules.json and pooling config, a
 * GGUF's <arch>.pooling_type, else the last token for a decoder embedding
 * model (config.json names a bare *Model architecture) and the mean of the
 * tokens for a generative one; L2-normalised unless a sentence-transformers
 * module list has no Normalize step. Writes the vector to out (capacity
 * floats) and its size to *dim; with out NULL, only *dim. Needs the step
 * engine and an LM head the logits-selection pass can split off (a MatMul
 * with constant weights); fails naming what is missing. */
SY_API sy_api_status sy_embed(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity, int32_t* dim);
/* The pooling as JSON: {"pooling": "mean" | "last" | "cls", "normalize":
 * true | false, "source": what decided it}. Fails naming a malformed
 * sentence-transformers config. *length and capacity as sy_parse_output. */
SY_API sy_api_status sy_engine_embedding_info(sy_engine* engine, char* json, int64_t capacity, int64_t* length);

/* Strict tool calls while text stays free: the constraint (kind
 * "triggered_tags", plugin.h) under which the text is free until the
 * family's call marker and each call is one of `tools_json`'s (OpenAI's
 * tools array) written the family's way, its arguments valid against the
 * tool's parameters. parser as sy_parse_output_as (NULL or "": the
 * engine's); one_call: the text ends after the first call. Writes the spec
 * (JSON) as sy_parse_output. */
SY_API sy_api_status sy_tool_call_constraint(const sy_engine* engine, const char* parser, const char* tools_json, int32_t one_call, char* json,
                                             int64_t capacity, int64_t* length);

/* ---- 1.8 ------------------------------------------------------------ */

/* Every position's final hidden state (the LM head's input), teacher-forced
 * as sy_logits: num_ids rows of *dim floats, row-major, written to out
 * (capacity floats); with out NULL, only *dim. Needs what sy_embed needs. */
SY_API sy_api_status sy_hidden_states(sy_engine* engine, const int32_t* ids, int32_t num_ids, float* out, int64_t capacity,
                                      int32_t* dim);
/* Rows of hidden states [num_rows x dim] through the model's own LM head
 * (its weights and quantization, any soft-capping tail): logits
 * [num_rows x *vocab] to out (capacity floats); with out NULL, only *vocab.
 * What Medusa-style drafting heads are trained against and score with.
 * Fails naming the sizes when dim is not the model's hidden size. */
SY_API sy_api_status sy_lm_head(sy_engine* engine, const float* rows, int32_t num_rows, int32_t dim, float* out, int64_t capacity,
                                int32_t* vocab);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SWITCHYARD_SWITCHYARD_H_ */
