/* check_mimi_config.c - the Mimi configuration: official defaults, overrides
 * with the official key names, refusals of unknown keys, wrong types and
 * unsupported values (each with a message naming the key). */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "mimi.h"

static int parse(const char *json, mimi_config *c, ms_error *e) {
    return mimi_config_parse(c, json, strlen(json), e);
}

START_TEST(test_defaults) {
    mimi_config c, d;
    ms_error e = {0};
    mimi_config_default(&d);
    ck_assert_int_eq(parse("{}", &c, &e), MS_OK);
    ck_assert_mem_eq(&c, &d, sizeof c);
    ck_assert_int_eq(c.frame_samples, 1920);
    ck_assert_int_eq(c.hop, 960);
    ck_assert_int_eq(c.resample_stride, 2);
    ck_assert_int_eq(c.num_codebooks, 8);
    ck_assert_int_eq(c.q_n_q, 32);
    ck_assert_int_eq(c.context, 250);
    ck_assert_int_eq(mimi_config_load(&c, NULL, &e), MS_OK);
    ck_assert_mem_eq(&c, &d, sizeof c);
}
END_TEST

/* The official _mimi_config written out in full parses to the defaults. */
START_TEST(test_official_full) {
    const char *j =
        "{\"sample_rate\": 24000, \"channels\": 1, \"frame_rate\": 12.5,"
        " \"seanet\": {\"channels\": 1, \"dimension\": 512, \"causal\": true, \"n_filters\": 64,"
        "  \"n_residual_layers\": 1, \"activation\": \"ELU\", \"compress\": 2, \"dilation_base\": 2,"
        "  \"disable_norm_outer_blocks\": 0, \"kernel_size\": 7, \"residual_kernel_size\": 3,"
        "  \"last_kernel_size\": 3, \"norm\": \"none\", \"pad_mode\": \"constant\", \"ratios\": [8, 6, 5, 4],"
        "  \"true_skip\": true},"
        " \"quantizer\": {\"dimension\": 256, \"n_q\": 32, \"bins\": 2048, \"input_dimension\": 512,"
        "  \"output_dimension\": 512},"
        " \"transformer\": {\"d_model\": 512, \"num_heads\": 8, \"num_layers\": 8, \"causal\": true,"
        "  \"layer_scale\": 0.01, \"context\": 250, \"conv_layout\": true, \"max_period\": 10000,"
        "  \"gating\": \"none\", \"norm\": \"layer_norm\", \"positional_embedding\": \"rope\","
        "  \"dim_feedforward\": 2048, \"input_dimension\": 512, \"output_dimensions\": [512]}}";
    mimi_config c, d;
    ms_error e = {0};
    mimi_config_default(&d);
    ck_assert_msg(parse(j, &c, &e) == MS_OK, "%s", e.msg);
    ck_assert_mem_eq(&c, &d, sizeof c);
}
END_TEST

START_TEST(test_overrides) {
    mimi_config c;
    ms_error e = {0};
    ck_assert_msg(parse("{\"sample_rate\": 16000, \"num_codebooks\": 4, \"seanet\": {\"ratios\": [8,5,4,4],"
                        " \"dimension\": 32, \"n_filters\": 4}, \"transformer\": {\"d_model\": 32, \"num_heads\": 2,"
                        " \"context\": 6, \"layer_scale\": null}, \"quantizer\": {\"n_q\": 4, \"bins\": 32,"
                        " \"input_dimension\": 32, \"output_dimension\": 32}}", &c, &e) == MS_OK, "%s", e.msg);
    ck_assert_int_eq(c.frame_samples, 1280);
    ck_assert_int_eq(c.hop, 640);
    ck_assert_int_eq(c.resample_stride, 2);
    ck_assert_int_eq(c.layer_scale, 0);
    ck_assert_int_eq(c.num_codebooks, 4);
}
END_TEST

static const struct {
    const char *json, *msg;
    int code;
} bad[] = {
    {"[]", "must be an object", MS_ERR_FORMAT},
    {"{\"sample_rat\": 1}", "unknown key sample_rat", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"bogus\": 1}}", "unknown key seanet.bogus", MS_ERR_UNSUPPORTED},
    {"{\"sample_rate\": \"24000\"}", "sample_rate must be an integer", MS_ERR_FORMAT},
    {"{\"sample_rate\": 2.5}", "sample_rate must be an integer", MS_ERR_FORMAT},
    {"{\"channels\": 2}", "channels", MS_ERR_RANGE},
    {"{\"num_codebooks\": 33}", "num_codebooks 33", MS_ERR_RANGE},
    {"{\"num_codebooks\": 0}", "num_codebooks", MS_ERR_RANGE},
    {"{\"frame_rate\": 7}", "not a whole number", MS_ERR_UNSUPPORTED},
    {"{\"frame_rate\": 25.0, \"sample_rate\": 24000, \"seanet\": {\"ratios\": [8,6,5,8]}}", "not a multiple", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"activation\": \"GELU\"}}", "seanet.activation = \"GELU\" unsupported", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"norm\": \"weight_norm\"}}", "seanet.norm", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"pad_mode\": \"reflect\"}}", "seanet.pad_mode", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"causal\": false}}", "seanet.causal = false unsupported", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"true_skip\": false}}", "seanet.true_skip", MS_ERR_UNSUPPORTED},
    {"{\"seanet\": {\"ratios\": []}}", "seanet.ratios", MS_ERR_FORMAT},
    {"{\"seanet\": {\"ratios\": [8, 0]}}", "seanet.ratios[1]", MS_ERR_RANGE},
    {"{\"seanet\": {\"ratios\": [8, 6, 5, \"4\"]}}", "seanet.ratios[3]", MS_ERR_RANGE},
    {"{\"seanet\": {\"n_filters\": 1000000}}", "seanet.n_filters", MS_ERR_RANGE},
    {"{\"seanet\": {\"n_filters\": 4096}}", "widest SEANet layer", MS_ERR_RANGE},
    {"{\"seanet\": {\"activation_params\": {\"alpha\": 0.5}}}", "alpha", MS_ERR_RANGE},
    {"{\"seanet\": {\"kernel_size\": 0}}", "seanet.kernel_size", MS_ERR_RANGE},
    {"{\"seanet\": {\"dimension\": 256}, \"transformer\": {\"d_model\": 512}}", "must equal seanet.dimension", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"gating\": \"silu\"}}", "transformer.gating", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"norm\": \"rms_norm\"}}", "transformer.norm", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"positional_embedding\": \"sin\"}}", "positional_embedding", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"context\": null}}", "context = null", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"context\": 100000}}", "transformer.context", MS_ERR_RANGE},
    {"{\"transformer\": {\"context\": 8192, \"num_layers\": 64}}", "K/V rings", MS_ERR_LIMIT},
    {"{\"transformer\": {\"num_heads\": 3}}", "head size", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"kv_repeat\": 2}}", "kv_repeat", MS_ERR_RANGE},
    {"{\"transformer\": {\"output_dimensions\": [512, 512]}}", "output_dimensions", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"d_model\": 256}}", "must equal seanet.dimension", MS_ERR_UNSUPPORTED},
    {"{\"transformer\": {\"conv_layout\": false}}", "conv_layout", MS_ERR_UNSUPPORTED},
    {"{\"quantizer\": {\"n_q\": 1}}", "quantizer.n_q", MS_ERR_RANGE},
    {"{\"quantizer\": {\"n_q_semantic\": 2}}", "n_q_semantic", MS_ERR_RANGE},
    {"{\"quantizer\": {\"input_dimension\": 128}}", "quantizer input/output", MS_ERR_UNSUPPORTED},
    {"{\"quantizer\": {\"bins\": 1e9}}", "quantizer.bins must be an integer", MS_ERR_FORMAT},
    {"{\"sample_rate\": 24000, \"sample_rate\": 16000}", "repeated", MS_ERR_FORMAT},
    {"{\"seanet\": ", "mimi config", MS_ERR_FORMAT},
};

START_TEST(test_refused) {
    mimi_config c;
    ms_error e = {0};
    int rc = parse(bad[_i].json, &c, &e);
    ck_assert_msg(rc == bad[_i].code, "%s: rc %d want %d (%s)", bad[_i].json, rc, bad[_i].code, e.msg);
    ck_assert_msg(strstr(e.msg, bad[_i].msg) != NULL, "%s: message \"%s\" lacks \"%s\"", bad[_i].json, e.msg,
                  bad[_i].msg);
}
END_TEST

START_TEST(test_files) {
    mimi_config c;
    ms_error e = {0};
    ck_assert_int_eq(mimi_config_load(&c, "tests/fixtures/mimi/tiny.json", &e), MS_OK);
    ck_assert_int_eq(c.n_filters, 4);
    ck_assert_int_eq(c.context, 8);
    ck_assert_int_eq(mimi_config_load(&c, "/nonexistent.json", &e), MS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent.json"));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("mimi_config");
    TCase *tc = tcase_new("config");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_official_full);
    tcase_add_test(tc, test_overrides);
    tcase_add_loop_test(tc, test_refused, 0, (int)(sizeof bad / sizeof *bad));
    tcase_add_test(tc, test_files);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN
