// The photon subcommands. Each returns the process exit code: 0 on success, 1 on a runtime error, 2 on a usage
// error. Errors are printed to stderr as "photon <command>: error: <message>".
#pragma once

namespace photon::cli {

int run_generate(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_detokenize(int argc, char** argv);
int run_template(int argc, char** argv);
int run_quantize(int argc, char** argv);
int run_perplexity(int argc, char** argv);
/// photon serve; also photon_web_server's main with `first` = 1 (its flags start at argv[1]) and its own name.
int run_serve(int argc, char** argv);
/// photon bench serve (argv[2] == "serve"): the serving benchmark over HTTP.
int run_bench_serve(int argc, char** argv);
int run_serve(int argc, char** argv, int first, const char* program);

}  // namespace photon::cli
