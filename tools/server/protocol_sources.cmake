# The OpenAI protocol's sources (everything of tools/server but HTTP),
# written against switchyard.h and nlohmann_json only. Two builds compile
# them: switchyard_openai here (serve), and the Python extension
# (python/CMakeLists.txt), so the Ray deployment serves the same protocol.
set(SWITCHYARD_PROTOCOL_SOURCES request_parsing.cpp chat_messages.cpp choice_output.cpp logprob_format.cpp server_metrics.cpp
    tokenizer_endpoints.cpp embeddings_endpoint.cpp responses_api.cpp openai_protocol.cpp)
list(TRANSFORM SWITCHYARD_PROTOCOL_SOURCES PREPEND "${CMAKE_CURRENT_LIST_DIR}/")
