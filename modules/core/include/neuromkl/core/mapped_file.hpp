#pragma once
// A whole file mapped into memory (POSIX mmap, shared): the feature store's values read in place from the kernel cache
// folder, or written there while the images are read, so that a store larger than the memory is paged from the disk by
// the operating system instead of held in the process (its pages are file-backed: clean ones are dropped under pressure,
// dirty ones written back).
#include <cstdint>
#include <memory>
#include <string>

namespace neuromkl {

class MappedFile {
 public:
  /// `path` mapped read-only. With `prefetch`, the file is read into memory at once (MAP_POPULATE: one sequential read
  /// instead of a page fault per few pages; for a file that fits in memory). IoError store:Map naming the file when it
  /// cannot be opened or mapped; an empty file maps to no bytes.
  static std::shared_ptr<MappedFile> OpenReadOnly(const std::string& path, bool prefetch);
  /// `path` created (or truncated) to `bytes` bytes, its blocks reserved on the disk first (posix_fallocate: a full disk
  /// is an IoError store:NoSpace here, never a SIGBUS on a later write through the mapping), and mapped for writing.
  static std::shared_ptr<MappedFile> Create(const std::string& path, std::uint64_t bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* Data() const { return data_; }
  /// The bytes for writing; std::logic_error for a read-only mapping.
  unsigned char* MutableData();
  std::uint64_t Size() const { return size_; }
  bool Writable() const { return writable_; }
  const std::string& Path() const { return path_; }
  /// Writes the dirty pages to the file and waits (msync): IoError store:Write naming the file on failure.
  void Flush() const;
  /// Shortens a writable mapping and its file to `bytes` (<= Size()): the mapping is remapped, so pointers into it are
  /// invalid afterwards. IoError store:Write on failure.
  void Truncate(std::uint64_t bytes);

 private:
  MappedFile(std::string path, int fd, unsigned char* data, std::uint64_t size, bool writable)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size), writable_(writable) {}
  std::string path_;
  int fd_ = -1;
  unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
  bool writable_ = false;
};

}  // namespace neuromkl
