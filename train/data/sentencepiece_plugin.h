// The C interface of trident_sentencepiece, the plugin that holds Debian's libsentencepiece.
//
// Why a plugin: Debian's libsentencepiece carries its own copy of protobuf (3.14) and LibTorch
// links another (Debian's 1.13 links libprotobuf.so.32); in one symbol scope they crash at
// start-up. So trident loads the plugin with dlmopen into a link-map namespace of its own, where
// it has its own protobuf, C++ runtime and C library. Only plain C crosses between namespaces:
// each side allocates and frees its own memory, so results stay in the engine's buffers (valid
// until its next call) for the caller to copy.
#pragma once

#include <cstddef>

extern "C" {

struct trident_sp_engine;

trident_sp_engine* trident_sp_create();
void trident_sp_destroy(trident_sp_engine* engine);
// These return 0 on success, else nonzero with trident_sp_error() saying why.
// Trains on the lines of the files (each with its newline) and loads the model it made.
int trident_sp_train(trident_sp_engine* engine, const char* options, const char* const* files, size_t file_count);
int trident_sp_load(trident_sp_engine* engine, const char* model, size_t size);
int trident_sp_encode(trident_sp_engine* engine, const char* text, size_t size, const int** ids, size_t* count);
int trident_sp_decode(trident_sp_engine* engine, const int* ids, size_t count, const char** text, size_t* size);
const char* trident_sp_error(const trident_sp_engine* engine);
// The serialized model loaded or trained last.
const char* trident_sp_model(const trident_sp_engine* engine, size_t* size);
int trident_sp_piece_size(const trident_sp_engine* engine);
int trident_sp_eos_id(const trident_sp_engine* engine);
}
