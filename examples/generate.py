#!/usr/bin/env python3
"""Greedy generation through libphoton's C ABI with ctypes (standard library only).

    python3 generate.py MODEL [ID,ID,...]   (finds libphoton.so through PHOTON_LIBRARY or the loader's path)
Prints the generated ids as a JSON list.
"""
import ctypes
import ctypes.util
import json
import os
import sys


class EngineParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("model", ctypes.c_char_p), ("load_format", ctypes.c_char_p),
                ("device", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("kv_cache_dtype", ctypes.c_char_p),
                ("kv_cache_memory_bytes", ctypes.c_uint64), ("memory_utilization", ctypes.c_double),
                ("num_kv_blocks", ctypes.c_int64), ("block_size", ctypes.c_int32), ("max_num_seqs", ctypes.c_int32),
                ("max_num_batched_tokens", ctypes.c_int32), ("max_model_len", ctypes.c_int32),
                ("enable_prefix_caching", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("tokenizer", ctypes.c_char_p)]


class SamplingParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("max_tokens", ctypes.c_int32), ("has_seed", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("ignore_eos", ctypes.c_int32), ("stop_token_ids", ctypes.POINTER(ctypes.c_int32)),
                ("num_stop_token_ids", ctypes.c_size_t), ("logprobs", ctypes.c_int32),
                ("prompt_logprobs", ctypes.c_int32), ("priority", ctypes.c_int32),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("num_stop", ctypes.c_size_t)]


class Event(ctypes.Structure):
    _fields_ = [("request_id", ctypes.c_uint64), ("token_ids", ctypes.POINTER(ctypes.c_int32)),
                ("num_tokens", ctypes.c_size_t), ("logprobs", ctypes.POINTER(ctypes.c_float)),
                ("top_ids", ctypes.POINTER(ctypes.c_int32)), ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
                ("top_n", ctypes.c_int32), ("finished", ctypes.c_int32), ("finish_reason", ctypes.c_int),
                ("error", ctypes.c_char_p), ("num_prompt_tokens", ctypes.c_int32),
                ("num_output_tokens", ctypes.c_int32), ("num_cached_prompt_tokens", ctypes.c_int32),
                ("arrival_time", ctypes.c_double), ("first_token_time", ctypes.c_double),
                ("finish_time", ctypes.c_double), ("text", ctypes.c_char_p), ("text_len", ctypes.c_size_t)]


def load_library():
    path = os.environ.get("PHOTON_LIBRARY") or ctypes.util.find_library("photon") or "libphoton.so.0"
    lib = ctypes.CDLL(path)
    # The *_init functions write only the bytes of these declarations (the by-value *_default functions return the
    # header's whole layout, which may be larger than what a binding declares).
    lib.photon_engine_params_init.argtypes = [ctypes.POINTER(EngineParams), ctypes.c_size_t]
    lib.photon_sampling_params_init.argtypes = [ctypes.POINTER(SamplingParams), ctypes.c_size_t]
    lib.photon_engine_create.argtypes = [ctypes.POINTER(EngineParams), ctypes.POINTER(ctypes.c_void_p)]
    lib.photon_last_error.restype = ctypes.c_char_p
    lib.photon_engine_last_error.argtypes = [ctypes.c_void_p]
    lib.photon_engine_last_error.restype = ctypes.c_char_p
    lib.photon_engine_destroy.argtypes = [ctypes.c_void_p]
    lib.photon_submit.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                  ctypes.POINTER(SamplingParams), ctypes.POINTER(ctypes.c_uint64)]
    lib.photon_step.argtypes = [ctypes.c_void_p]
    lib.photon_has_unfinished.argtypes = [ctypes.c_void_p]
    lib.photon_poll.argtypes = [ctypes.c_void_p, ctypes.POINTER(Event), ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_size_t)]
    lib.photon_version_string.restype = ctypes.c_char_p
    return lib


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: generate.py MODEL [ID,ID,...]")
    prompt = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 3]
    lib = load_library()
    # struct_size says how much of the struct this program knows: the library reads and writes no further.
    params = EngineParams()
    lib.photon_engine_params_init(ctypes.byref(params), ctypes.sizeof(EngineParams))
    params.model = sys.argv[1].encode()
    params.max_model_len = 256
    engine = ctypes.c_void_p()
    if lib.photon_engine_create(ctypes.byref(params), ctypes.byref(engine)) != 0:
        sys.exit("error: " + lib.photon_last_error().decode())
    try:
        sampling = SamplingParams()
        lib.photon_sampling_params_init(ctypes.byref(sampling), ctypes.sizeof(SamplingParams))
        sampling.temperature = 0.0
        sampling.max_tokens = 24
        sampling.ignore_eos = 1
        ids = (ctypes.c_int32 * len(prompt))(*prompt)
        request = ctypes.c_uint64()
        if lib.photon_submit(engine, ids, len(prompt), ctypes.byref(sampling), ctypes.byref(request)) != 0:
            sys.exit("error: " + lib.photon_engine_last_error(engine).decode())
        events = (Event * 16)()
        count = ctypes.c_size_t()
        output = []
        while lib.photon_has_unfinished(engine):
            lib.photon_step(engine)
            lib.photon_poll(engine, events, 16, ctypes.byref(count))
            for e in events[:count.value]:
                output.extend(e.token_ids[i] for i in range(e.num_tokens))
        print(json.dumps(output))
    finally:
        lib.photon_engine_destroy(engine)


if __name__ == "__main__":
    main()
