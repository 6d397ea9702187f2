// capture-worklet.js - AudioWorklet processor "moshid-capture": collects the
// microphone's samples (the AudioContext's rate, mono: channels averaged)
// into chunks of `chunk` samples and posts each to the main thread as
// {pcm: Float32Array, rms, peak}. Its output is silence (it is connected to
// the destination only so that the graph keeps it running).

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.chunk = o.chunk || 480;
    this.buf = new Float32Array(this.chunk);
    this.n = 0;
    this.sumsq = 0;
    this.peak = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const nch = input.length, len = input[0].length;
    for (let i = 0; i < len; i++) {
      let x = 0;
      for (let c = 0; c < nch; c++) x += input[c][i];
      x /= nch;
      this.buf[this.n++] = x;
      this.sumsq += x * x;
      const a = x < 0 ? -x : x;
      if (a > this.peak) this.peak = a;
      if (this.n === this.chunk) {
        const pcm = this.buf;
        this.port.postMessage({ pcm, rms: Math.sqrt(this.sumsq / this.chunk), peak: this.peak }, [pcm.buffer]);
        this.buf = new Float32Array(this.chunk);
        this.n = 0;
        this.sumsq = 0;
        this.peak = 0;
      }
    }
    return true;
  }
}

registerProcessor("moshid-capture", CaptureProcessor);
