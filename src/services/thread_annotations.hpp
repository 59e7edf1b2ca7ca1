// SPDX-License-Identifier: MIT
// Clang's thread-safety analysis (-Wthread-safety): which lock guards which
// data, and which functions must be called with it held. The clang build that
// `make test` compiles (target thread_safety) turns a missing lock into a
// compile error; other compilers see nothing.
//
// Conventions: a function named *_locked carries RDMX_REQUIRES(the lock it
// expects); a class that is a lock carries RDMX_CAPABILITY; scoped guards
// are RDMX_SCOPED_CAPABILITY (services/mutex.hpp), because libstdc++'s
// std::lock_guard and std::mutex carry no annotations the analysis can see.
#pragma once

#if defined(__clang__)
#define RDMX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define RDMX_THREAD_ANNOTATION(x)
#endif

#define RDMX_CAPABILITY(name) RDMX_THREAD_ANNOTATION(capability(name))
#define RDMX_SCOPED_CAPABILITY RDMX_THREAD_ANNOTATION(scoped_lockable)
#define RDMX_GUARDED_BY(x) RDMX_THREAD_ANNOTATION(guarded_by(x))
#define RDMX_REQUIRES(...) RDMX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define RDMX_REQUIRES_SHARED(...) RDMX_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define RDMX_ACQUIRE(...) RDMX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RDMX_ACQUIRE_SHARED(...) RDMX_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RDMX_RELEASE(...) RDMX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RDMX_RELEASE_SHARED(...) RDMX_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RDMX_TRY_ACQUIRE(...) RDMX_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RDMX_EXCLUDES(...) RDMX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define RDMX_ASSERT_CAPABILITY(x) RDMX_THREAD_ANNOTATION(assert_capability(x))
#define RDMX_ASSERT_SHARED_CAPABILITY(x) RDMX_THREAD_ANNOTATION(assert_shared_capability(x))
#define RDMX_RETURN_CAPABILITY(x) RDMX_THREAD_ANNOTATION(lock_returned(x))
// For the few functions whose locking the analysis cannot follow (a lock
// taken in one function and released in another); say why beside each use.
#define RDMX_NO_THREAD_SAFETY_ANALYSIS RDMX_THREAD_ANNOTATION(no_thread_safety_analysis)
