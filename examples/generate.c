/* Greedy generation through the C ABI.   generate_c MODEL */
#include <stdio.h>

#include <photon.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL\n", argv[0]);
    return 2;
  }
  photon_engine_params params = photon_engine_params_default();
  params.model = argv[1];
  params.max_model_len = 256;
  photon_engine* engine = NULL;
  if (photon_engine_create(&params, &engine) != PHOTON_OK) {
    fprintf(stderr, "error: %s\n", photon_last_error());
    return 1;
  }
  photon_sampling_params sampling = photon_sampling_params_default();
  sampling.temperature = 0.0f;
  sampling.max_tokens = 8;
  sampling.ignore_eos = 1;
  const int32_t prompt[] = {1, 2, 3};
  uint64_t id = 0;
  if (photon_submit(engine, prompt, 3, &sampling, &id) != PHOTON_OK) {
    fprintf(stderr, "error: %s\n", photon_engine_last_error(engine));
    photon_engine_destroy(engine);
    return 1;
  }
  printf("photon %s\n", photon_version_string());
  photon_event events[8];
  while (photon_has_unfinished(engine)) {
    photon_step(engine);
    size_t n = 0;
    photon_poll(engine, events, 8, &n);
    for (size_t i = 0; i < n; ++i) {
      for (size_t t = 0; t < events[i].num_tokens; ++t) printf("%d ", events[i].token_ids[t]);
      if (events[i].finished) printf("[finish reason %d]\n", (int)events[i].finish_reason);
    }
  }
  photon_engine_destroy(engine);
  return 0;
}
