// XGRAD_TEST_SANITIZED is defined in an AddressSanitizer or ThreadSanitizer build (GCC's
// __SANITIZE_* macros, clang's __has_feature), for checks a sanitizer's runtime makes meaningless.
#pragma once
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define XGRAD_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define XGRAD_TEST_SANITIZED 1
#endif
#endif
