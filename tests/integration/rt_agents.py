"""Drive an agent framework's OpenAI Realtime client against moshid's
/v1/realtime, without the framework's servers: LiveKit Agents'
RealtimeModel session, or a Pipecat pipeline holding only its
OpenAIRealtimeLLMService. Runs in build/venv-agents (their dependencies
clash with build/venv's pins); test_realtime_agents.py calls it.

    rt_agents.py livekit|pipecat PORT

Streams a tone, paced by the model (a first second's burst, then one 80 ms
frame in per audio frame out), until WANT audio frames and some transcript
came back; prints one JSON line {"audio", "text", "errors"} and exits 0, or
1 on a deadline."""
import asyncio
import json
import math
import struct
import sys

WANT = 20          # audio frames to receive
BURST = 12         # frames sent before waiting for output
DEADLINE_S = 60


def pcm(k):
    """Frame k (80 ms, 24 kHz, 16-bit) of a 220 Hz tone."""
    return struct.pack("<1920h", *[int(8000 * math.sin(2 * math.pi * 220 * (k * 1920 + i) / 24000))
                                   for i in range(1920)])


async def livekit(port):
    import aiohttp
    from livekit import rtc
    from livekit.plugins import openai as lkoai

    out = {"audio": 0, "text": 0, "errors": []}
    async with aiohttp.ClientSession() as http:
        model = lkoai.realtime.RealtimeModel(model="moshi", base_url=f"http://127.0.0.1:{port}/v1", api_key="token",
                                             turn_detection=None, input_audio_transcription=None,
                                             http_session=http)
        sess = model.session()
        gens = asyncio.Queue()
        sess.on("generation_created", gens.put_nowait)
        sess.on("error", lambda ev: out["errors"].append(str(ev.error)))

        def frame(k):
            return rtc.AudioFrame(data=pcm(k), sample_rate=24000, num_channels=1, samples_per_channel=1920)
        sent = 0
        for _ in range(BURST):
            sess.push_audio(frame(sent))
            sent += 1
        while out["audio"] < WANT:
            gen = await gens.get()
            async for msg in gen.message_stream:
                async def text():
                    async for t in msg.text_stream:
                        out["text"] += 1 if t else 0
                tt = asyncio.create_task(text())
                async for _f in msg.audio_stream:
                    out["audio"] += 1
                    sess.push_audio(frame(sent))
                    sent += 1
                    if out["audio"] >= WANT:
                        break
                if out["audio"] >= WANT:
                    tt.cancel()
                    break
                await tt
        sess.interrupt()   # response.cancel: must not be an error
        await sess.aclose()
    return out


async def pipecat(port):
    from pipecat.frames.frames import ErrorFrame, InputAudioRawFrame, LLMTextFrame, TTSAudioRawFrame, TTSTextFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService

    out = {"audio": 0, "text": 0, "errors": []}
    done = asyncio.Event()
    state = {"sent": 0, "task": None}

    async def send_one():
        await state["task"].queue_frame(InputAudioRawFrame(audio=pcm(state["sent"]), sample_rate=24000,
                                                           num_channels=1))
        state["sent"] += 1

    class Sink(FrameProcessor):
        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                out["audio"] += 1
                await send_one()
            elif isinstance(frame, (TTSTextFrame, LLMTextFrame)):
                out["text"] += 1
            elif isinstance(frame, ErrorFrame):
                out["errors"].append(str(frame.error))
                done.set()
            if out["audio"] >= WANT and out["text"] > 0:
                done.set()
            await self.push_frame(frame, direction)

    llm = OpenAIRealtimeLLMService(api_key="token", base_url=f"ws://127.0.0.1:{port}/v1/realtime",
                                   settings=OpenAIRealtimeLLMService.Settings(model="moshi"))
    task = PipelineTask(Pipeline([llm, Sink()]),
                        params=PipelineParams(audio_in_sample_rate=24000, audio_out_sample_rate=24000))
    state["task"] = task
    runner = PipelineRunner(handle_sigint=False)
    run = asyncio.create_task(runner.run(task))
    for _ in range(BURST):
        await send_one()
    await done.wait()
    await task.cancel()
    await run
    return out


def main():
    which, port = sys.argv[1], int(sys.argv[2])
    f = {"livekit": livekit, "pipecat": pipecat}[which]
    try:
        out = asyncio.run(asyncio.wait_for(f(port), DEADLINE_S))
    except asyncio.TimeoutError:
        print(json.dumps({"deadline": DEADLINE_S}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
