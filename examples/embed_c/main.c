/* Embedding Switchyard from plain C: load a manifest profile, stream a
 * completion token by token, print the request's figures.
 *   embed_example MANIFEST PROFILE "PROMPT" [MAX_TOKENS] */
#include <stdio.h>
#include <stdlib.h>
#include <switchyard/switchyard.h>

static void on_token(void* user, int32_t token, const char* text) {
  (void)token;
  (void)user;
  fputs(text, stdout);
  fflush(stdout);
}

int main(int argc, char** argv) {
  sy_engine_options options = {sizeof(sy_engine_options), NULL, NULL, NULL, 0};
  sy_request_params params = {sizeof(sy_request_params)};
  sy_request_info info = {sizeof(sy_request_info)};
  sy_engine* engine = NULL;
  sy_request* request = NULL;
  if (argc < 4) {
    fprintf(stderr, "usage: %s MANIFEST PROFILE PROMPT [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  options.manifest = argv[1];
  options.profile = argv[2];
  if (sy_engine_create(&options, &engine) != SY_API_OK) {
    fprintf(stderr, "error: %s\n", sy_last_error());
    return 1;
  }
  params.prompt_text = argv[3];
  params.max_tokens = argc > 4 ? atoi(argv[4]) : 64;
  params.on_token = on_token;
  fputs(argv[3], stdout);
  if (sy_submit(engine, &params, &request) != SY_API_OK) {
    fprintf(stderr, "error: %s\n", sy_last_error());
    sy_engine_destroy(engine);
    return 1;
  }
  sy_request_wait(request);
  if (sy_request_info_get(request, &info) != SY_API_OK) {
    fprintf(stderr, "error: %s\n", sy_last_error());
    return 1;
  }
  printf("\n[%d prompt tokens, %d generated, finish reason %d, ttft %.2f ms]\n", info.prompt_tokens, info.completion_tokens,
         info.finish_reason, info.ttft_ms);
  sy_request_release(request);
  sy_engine_destroy(engine);
  return 0;
}
