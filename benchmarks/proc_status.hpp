// status_kb(key): a "key: N kB" value of /proc/self/status (VmRSS, VmHWM), -1 if absent.
// Shared by the peak-memory drivers (train_step_rss, attention_memory).
#pragma once
#include <cstdlib>
#include <fstream>
#include <string>

inline long status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
  return -1;
}
